"""A session scoped to several namespaces, read by a client limited to one of them: every surface
shows only the parts in namespaces the reader may read (docs/DECISIONS.md, API)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import T0, make_client, make_namespace, make_object, session

SUPPORT_TEXT = "Alice prefers Python for support scripts"
TRAVEL_TEXT = "Alice flies to Lisbon on the ninth"


@pytest.fixture
def mixed(namespace, client_api):
    """A session of ``["support", "travel"]`` injecting one object of each, with a signal on
    each, posted by a client of both; ``client_api`` is limited to support."""
    make_namespace("travel")
    writer, token = make_client("both-1", "client", ["support", "travel"])
    formed = T0 - timedelta(days=1)
    support = make_object(writer, "support", content=SUPPORT_TEXT, ts=formed)
    travel = make_object(writer, "travel", content=TRAVEL_TEXT, ts=formed)
    body = session(
        "r-mixed",
        [(str(support.pk), 40), (str(travel.pk), 50)],
        [(str(support.pk), "REFERENCED"), (str(travel.pk), "CONFIRMED")],
        namespace_scope=["support", "travel"],
        session_id="conv-mixed",
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    resp = api.post("/api/v1/feedback-sessions", body, format="json")
    assert resp.status_code == 201, resp.content
    return {"record": resp.json(), "support": str(support.pk), "travel": str(travel.pk)}


def test_a_support_client_reads_only_the_support_part_of_a_mixed_session(client_api, mixed):
    resp = client_api.get(f"/api/v1/feedback-sessions/{mixed['record']['id']}")
    assert resp.status_code == 200
    assert mixed["travel"] not in resp.content.decode()
    body = resp.json()
    assert body["injected_object_ids"] == [mixed["support"]]
    assert [s["object_id"] for s in body["signals"]] == [mixed["support"]]
    assert body["namespace_scope"] == ["support"]
    assert body["session_str_mean"] is None
    assert body["partial"] is True
    # the travel object itself stays invisible, as before
    assert client_api.get(f"/api/v1/objects/{mixed['travel']}").status_code == 404


def test_an_operator_reads_the_whole_mixed_session(operator_api, mixed):
    body = operator_api.get(f"/api/v1/feedback-sessions/{mixed['record']['id']}").json()
    assert body == mixed["record"]
    assert "partial" not in body


def test_the_session_export_counts_only_the_readers_part(client_api, operator_api, mixed):
    def rows(api):
        resp = api.get("/api/v1/export/sessions.csv?namespace=support")
        assert resp.status_code == 200
        text = b"".join(resp.streaming_content).decode()
        return text, list(csv.DictReader(io.StringIO(text)))

    text, (row,) = rows(client_api)
    assert (row["injections"], row["signals"], row["namespace_scope"]) == ("1", "1", "support")
    assert row["session_str_mean"] == ""
    assert "travel" not in text
    _, (full,) = rows(operator_api)
    assert (full["injections"], full["signals"], full["namespace_scope"]) == (
        "2",
        "2",
        "support travel",
    )


def test_the_dashboard_session_page_hides_the_other_namespaces_content(client_api, mixed):
    page = Client()
    page.force_login(client_api.row.user)
    resp = page.get(f"/sessions/{mixed['record']['id']}/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert SUPPORT_TEXT in html
    assert TRAVEL_TEXT not in html
    assert mixed["travel"] not in html
    assert "travel" not in html.lower()


def test_the_dashboard_session_list_counts_only_the_readers_part(client_api, mixed):
    page = Client()
    page.force_login(client_api.row.user)
    resp = page.get("/sessions/?namespace=support")
    assert resp.status_code == 200
    (row,) = [r for r in resp.context["rows"] if str(r.session.pk) == mixed["record"]["id"]]
    assert (row.inj["n"], row.inj["cost"], row.sig["n"]) == (1, 40, 1)
