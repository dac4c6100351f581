"""Shared fixtures: the four personas (admin, operator, client, outsider) and object helpers."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.factories import make_client, make_namespace


def services_required() -> bool:
    """In CI (and whenever the URLs are set) PostgreSQL/Redis tests must run, never skip."""
    return bool(os.environ.get("RMS_REQUIRE_SERVICES") or os.environ.get("DATABASE_URL"))


@pytest.fixture
def require_postgres():
    if not settings.DATABASE_IS_POSTGRES:
        if services_required():
            pytest.fail("PostgreSQL is required here (DATABASE_URL is set) but not in use")
        pytest.skip("needs PostgreSQL (set DATABASE_URL)")


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
def _close_overview_side_connection(django_db_setup, django_db_blocker):
    """The overview may open a second connection on its own thread (dashboard.selectors); close
    it before pytest-django drops the test database."""
    yield
    from dashboard import selectors

    with django_db_blocker.unblock():
        selectors.close_side_connection()


@pytest.fixture(autouse=True)
def _webhook_threads_closed():
    """The webhook dispatcher's threads keep their database connections between attempts;
    close them after each test so the test database can be dropped."""
    yield
    from delivery import dispatch

    dispatch.shutdown_pool()
