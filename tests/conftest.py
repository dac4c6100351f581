"""Shared fixtures: the four personas (admin, operator, client, outsider) and object helpers."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.factories import make_client, make_namespace


def services_required() -> bool:
    """In CI (``RMS_REQUIRE_SERVICES=1``) tests needing PostgreSQL or Redis must run, never skip."""
    return bool(os.environ.get("RMS_REQUIRE_SERVICES"))


#: marker -> (what it needs, the variable that configures it, whether it is configured)
SERVICES = {
    "postgres": ("PostgreSQL", "DATABASE_URL", lambda: settings.DATABASE_IS_POSTGRES),
    "redis": (
        "Redis",
        "REDIS_URL",
        lambda: bool(settings.REDIS_URL) and settings.CELERY_BROKER_URL.startswith("redis"),
    ),
}
#: fixtures that need a server: a test asking for one is treated as carrying its marker
SERVICE_FIXTURES = {"require_postgres": "postgres", "require_redis": "redis"}


def need(marker: str) -> None:
    """Skip the running test, naming the missing server, unless CI requires the servers: then
    fail with the same words. One place, so no test can fail on a missing server with the
    server's own (or the SQLite's) error instead."""
    label, variable, configured = SERVICES[marker]
    if configured():
        return
    message = f"needs {label} (set {variable})"
    if services_required():
        pytest.fail(f"{message}, and RMS_REQUIRE_SERVICES=1 requires it", pytrace=False)
    pytest.skip(message)


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in SERVICE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for marker in SERVICES:
        if item.get_closest_marker(marker):
            need(marker)


@pytest.fixture
def require_postgres():
    need("postgres")


@pytest.fixture
def require_redis():
    need("redis")


@pytest.fixture
def namespace(db):
    return make_namespace("support")


@pytest.fixture
def other_namespace(db):
    return make_namespace("billing")


def _api(client_row, token):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    api.row = client_row
    return api


@pytest.fixture
def admin_api(namespace):
    return _api(*make_client("admin-1", "admin"))


@pytest.fixture
def operator_api(namespace):
    return _api(*make_client("operator-1", "operator"))


@pytest.fixture
def client_api(namespace):
    return _api(*make_client("client-1", "client", [namespace.name]))


@pytest.fixture
def outsider_api(namespace, other_namespace):
    """A client of another namespace: must never see ``support``."""
    return _api(*make_client("outsider-1", "client", [other_namespace.name]))


@pytest.fixture
def anon_api():
    return APIClient()


@pytest.fixture(autouse=True, scope="session")
def _test_database_released(django_db_setup, django_db_blocker):
    """Nothing may hold the test database when pytest-django drops it. The overview opens
    connections on its own threads (dashboard.selectors): closed here. The live server's request
    threads are daemons; one still serving when the browser went away ends without closing its
    connection: on PostgreSQL its session is ended here."""
    yield
    from django.db import connection

    from dashboard import selectors

    with django_db_blocker.unblock():
        selectors.close_side_connection()
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            connection.close()


@pytest.fixture(autouse=True)
def _webhook_threads_closed():
    """The webhook dispatcher's threads keep their database connections between attempts;
    close them after each test so the test database can be dropped."""
    yield
    from delivery import dispatch

    dispatch.shutdown_pool()
