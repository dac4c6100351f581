"""What a new client meets first: the token header, reading a session by its session_id, starting
the change feed at its head, and unknown query parameters."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import T0, make_client, make_object, post, session


@pytest.fixture
def token(namespace):
    return make_client("client-b", "client", [namespace.name])[1]


def test_a_bearer_header_is_taken_like_a_token_header(token):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/namespaces").status_code == 200


@pytest.mark.parametrize("header", ["Basic dXNlcjpwdw==", "ApiKey abc", None])
def test_a_missing_or_foreign_header_says_to_send_a_token_header(db, header):
    api = APIClient()
    if header:
        api.credentials(HTTP_AUTHORIZATION=header)
    resp = api.get("/api/v1/namespaces")
    assert resp.status_code == 401
    assert resp["WWW-Authenticate"] == "Token"
    assert "Authorization: Token <key>" in resp.json()["error"]["message"]


def test_a_bad_bearer_token_is_refused(db):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    resp = api.get("/api/v1/namespaces")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "authentication_failed"


def test_a_session_is_read_by_its_session_id_newest_record_first(client_api, outsider_api):
    obj = str(make_object(client_api.row, ts=T0).pk)
    first = post(client_api, session("r-1", [(obj, 10)], session_id="conv-7", hours=1)).json()
    second = post(client_api, session("r-2", [(obj, 10)], session_id="conv-7", hours=2)).json()
    by_sid = client_api.get("/api/v1/feedback-sessions/conv-7")
    assert by_sid.status_code == 200
    assert by_sid.json() == second
    assert client_api.get(f"/api/v1/feedback-sessions/{first['id']}").json() == first
    assert client_api.get("/api/v1/feedback-sessions/conv-404").status_code == 404
    assert outsider_api.get("/api/v1/feedback-sessions/conv-7").status_code == 404


@pytest.mark.django_db(transaction=True)  # the feed reads committed transactions only
def test_the_change_feed_starts_at_its_head_with_after_now(client_api):
    make_object(client_api.row, content="before")
    everything = client_api.get("/api/v1/changes").json()
    assert len(everything["results"]) == 1
    head = client_api.get("/api/v1/changes?after=now").json()
    assert head["results"] == []
    assert head["next_cursor"] == everything["next_cursor"]
    later = make_object(client_api.row, content="after")
    page = client_api.get(f"/api/v1/changes?after={head['next_cursor']}").json()
    assert [e["target_id"] for e in page["results"]] == [str(later.pk)]


@pytest.mark.parametrize(
    ("persona", "path", "name"),
    [
        ("client_api", "/api/v1/objects?limit=5", "limit"),
        ("client_api", "/api/v1/metrics?namespace=support&window=24h", "window"),
        ("operator_api", "/api/v1/review-queue?namespace=support&page=2", "page"),
        ("client_api", "/api/v1/changes?cursor=abc", "cursor"),
        ("operator_api", "/api/v1/tasks?kinds=verify_chain", "kinds"),
        ("client_api", "/api/v1/alerts?status=open", "status"),
    ],
)
def test_an_unknown_query_parameter_is_a_400_naming_it(request, persona, path, name):
    resp = request.getfixturevalue(persona).get(path)
    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["code"] == "validation_error"
    assert list(error["fields"]) == [name]
