"""Login throttling on the dashboard and the Django admin: per-account and per-address LIMITs,
a clear message, a cool-off that ends; API tokens are not affected."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from tests.factories import make_client, make_namespace

pytestmark = pytest.mark.django_db

PASSWORD = "right-pass-123"
DASHBOARD = "/accounts/login/"
ADMIN = "/admin/login/"
MESSAGE = b"Too many failed log-ins"
#: The documented defaults (README: RMS_LOGIN_FAILURE_LIMIT, RMS_LOGIN_COOL_OFF_MINUTES).
LIMIT = 5
COOL_OFF = timedelta(minutes=15)


@pytest.fixture(autouse=True)
def _fast_hashes(settings):
    """Every attempt hashes a password: a cheap hasher keeps the many attempts quick."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def accounts():
    make_namespace("support")
    users = {}
    for name, role in (("alice", "admin"), ("bob", "operator"), ("carol", "client")):
        user = make_client(name, role, ["support"] if role == "client" else None)[0].user
        user.set_password(PASSWORD)
        user.is_staff = role in ("admin", "operator")  # both may open the admin's login
        user.is_superuser = role == "admin"
        user.save()
        users[name] = user
    return users


def attempt(page: str, username: str, password: str, address: str):
    client = Client(REMOTE_ADDR=address)
    return client, client.post(page, {"username": username, "password": password})


def logged_in(response) -> bool:
    return response.status_code == 302


def fail(page: str, username: str, address: str, times: int) -> None:
    """``times`` wrong passwords: the form again with its error, until the failure that
    reaches the limit, which is already answered with the lockout."""
    for i in range(1, times + 1):
        _, response = attempt(page, username, "wrong", address)
        assert response.status_code == (429 if i >= LIMIT else 200)


@pytest.mark.parametrize("page", [DASHBOARD, ADMIN])
def test_the_right_password_is_refused_after_too_many_failures_for_the_account(accounts, page):
    fail(page, "alice", "10.0.0.1", LIMIT - 1)
    client, response = attempt(page, "alice", PASSWORD, "10.0.0.1")
    assert logged_in(response)  # one below the LIMIT: still in
    client.post("/accounts/logout/")

    fail(page, "alice", "10.0.0.1", LIMIT)
    _, response = attempt(page, "alice", PASSWORD, "10.0.0.1")
    assert response.status_code == 429
    assert MESSAGE in response.content and b"15 minutes" in response.content
    # The account is locked from every address ...
    _, response = attempt(page, "alice", PASSWORD, "10.9.9.9")
    assert response.status_code == 429
    # ... and another account from another address still logs in.
    _, response = attempt(page, "bob", PASSWORD, "10.9.9.9")
    assert logged_in(response)


@pytest.mark.parametrize("page", [DASHBOARD, ADMIN])
def test_an_address_guessing_many_accounts_is_locked_out(accounts, page):
    for i in range(1, LIMIT + 1):
        _, response = attempt(page, f"guess-{i}", "wrong", "10.0.0.2")
        assert response.status_code == (429 if i == LIMIT else 200)
    _, response = attempt(page, "bob", PASSWORD, "10.0.0.2")
    assert response.status_code == 429 and MESSAGE in response.content
    # The same account from another address is not locked: no failure was for it.
    _, response = attempt(page, "bob", PASSWORD, "10.0.0.3")
    assert logged_in(response)


def test_the_lockout_ends_after_the_cool_off(accounts):
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        fail(DASHBOARD, "bob", "10.0.0.4", LIMIT)
        clock.shift(COOL_OFF - timedelta(seconds=5))
        _, response = attempt(DASHBOARD, "bob", PASSWORD, "10.0.0.4")
        assert response.status_code == 429
        clock.shift(timedelta(seconds=10))
        client, response = attempt(DASHBOARD, "bob", PASSWORD, "10.0.0.4")
        assert logged_in(response)
        assert client.get("/").status_code == 200


def test_api_tokens_still_work_from_a_locked_out_address(accounts):
    make_namespace("support")
    _, token = make_client("api-user", "operator")
    fail(DASHBOARD, "bob", "10.0.0.5", LIMIT)
    assert attempt(DASHBOARD, "bob", PASSWORD, "10.0.0.5")[1].status_code == 429
    api = Client(REMOTE_ADDR="10.0.0.5", HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/namespaces").status_code == 200
    # A bad token is the API's 401, never a login lockout.
    for _ in range(LIMIT + 1):
        bad = Client(REMOTE_ADDR="10.0.0.6", HTTP_AUTHORIZATION="Token nope")
        assert bad.get("/api/v1/namespaces").status_code == 401
    assert logged_in(attempt(DASHBOARD, "carol", PASSWORD, "10.0.0.6")[1])


def test_failures_are_not_counted_from_a_forged_forwarded_for_header(accounts):
    for i in range(LIMIT):
        client = Client(REMOTE_ADDR="10.0.0.7", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
        client.post(DASHBOARD, {"username": f"guess-{i}", "password": "wrong"})
    _, response = attempt(DASHBOARD, "carol", PASSWORD, "10.0.0.7")
    assert response.status_code == 429


def test_behind_a_trusted_proxy_the_address_it_recorded_is_limited(accounts, settings):
    settings.RMS_TRUSTED_PROXIES = 1
    for i in range(1, LIMIT + 1):
        # The client forged the left entry; the proxy appended the address it saw.
        client = Client(REMOTE_ADDR="10.0.0.8", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}, 203.0.113.9")
        response = client.post(DASHBOARD, {"username": f"guess-{i}", "password": "wrong"})
        assert response.status_code == (429 if i == LIMIT else 200)
    locked = Client(REMOTE_ADDR="10.0.0.8", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert locked.post(DASHBOARD, {"username": "bob", "password": PASSWORD}).status_code == 429
    # Another client behind the same proxy is not locked out.
    other = Client(REMOTE_ADDR="10.0.0.8", HTTP_X_FORWARDED_FOR="203.0.113.10")
    assert logged_in(other.post(DASHBOARD, {"username": "bob", "password": PASSWORD}))
