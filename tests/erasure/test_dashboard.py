"""The erasures page: admins only, linked from the overview for them, a request from its form
runs and its receipt is listed."""

from __future__ import annotations

import pytest
from django.test import Client

from erasure.models import Erasure
from taskruns import tasks
from taskruns.models import TaskRun
from tests.erasure.conftest import ALICE
from tests.factories import make_client

pytestmark = pytest.mark.django_db


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_admins_request_an_erasure_and_read_its_receipt(admin_api, client_api, personal_log):
    page = login(admin_api.row.user)
    assert b"data-erasures-link" in page.get("/").content
    response = page.post(
        "/erasures/request/", {"kind": "actor", "subject": ALICE, "namespace": "support"}
    )
    assert response.status_code == 302
    erasure = Erasure.objects.get()
    assert erasure.state == Erasure.QUEUED
    assert "Queued" in page.get("/erasures/").content.decode()
    assert tasks.run_task.run(str(erasure.task_id)) == TaskRun.SUCCEEDED
    html = page.get("/erasures/").content.decode()
    assert "Completed" in html and str(Erasure.objects.get().operation_id) in html
    assert ALICE not in html  # the receipt shows the pseudonym


def test_a_bad_request_from_the_form_is_a_message(admin_api, namespace):
    page = login(admin_api.row.user)
    response = page.post("/erasures/request/", {"kind": "planet", "namespace": "support"},
                         follow=True)  # fmt: skip
    assert response.status_code == 200 and "Must be one of" in response.content.decode()
    assert not Erasure.objects.exists()


def test_operators_and_clients_neither_see_nor_use_it(operator_api, client_api):
    for row in (operator_api.row, client_api.row):
        page = login(row.user)
        assert b"data-erasures-link" not in page.get("/").content
        assert page.get("/erasures/").status_code == 403
        body = {"kind": "namespace", "namespace": "support"}
        assert page.post("/erasures/request/", body).status_code == 403
    assert not Erasure.objects.exists()


def test_a_namespace_scoped_admin_sees_only_its_receipts(admin_api, other_namespace):
    row, _ = make_client("billing-admin", "admin", ["billing"])
    mine = login(row.user)
    login(admin_api.row.user).post(
        "/erasures/request/", {"kind": "namespace", "namespace": "support"}
    )
    assert Erasure.objects.count() == 1
    assert "No erasures yet" in mine.get("/erasures/").content.decode()


def test_a_superuser_without_an_api_client_uses_the_page(client_api, personal_log):
    """A Django superuser with no API client acts through an unsaved admin stand-in: it has no
    namespace links, so it sees every receipt and may erase anywhere (once a 500: the stand-in's
    links were read from the database before it had a primary key)."""
    from django.contrib.auth import get_user_model

    root = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    page = login(root)
    assert page.get("/erasures/").status_code == 200
    response = page.post(
        "/erasures/request/", {"kind": "actor", "subject": ALICE, "namespace": "support"}
    )
    assert response.status_code == 302
    assert Erasure.objects.get().namespace.name == "support"
    assert "Queued" in page.get("/erasures/").content.decode()
