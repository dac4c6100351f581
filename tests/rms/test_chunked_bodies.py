"""Issue 15, case 8: a body sent with ``Transfer-Encoding: chunked`` (no Content-Length) is read,
and the size limit holds on the bytes read. Through gunicorn, what production runs: Django's
test client always sends a Content-Length."""

from __future__ import annotations

import http.client
import json

import pytest

from feedback.models import FeedbackSession
from rms.models import Operation
from tests.factories import make_client, make_namespace, make_object
from tests.servers import gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 8 * 1024 * 1024  # RMS_MAX_BODY_BYTES's default


def chunks(data: bytes, size: int = 64 * 1024):
    for i in range(0, len(data), size):
        yield data[i : i + size]


def send(port: int, path: str, data: bytes, token: str, *, chunked: bool = True):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    try:
        if chunked:
            conn.request("POST", path, body=chunks(data), headers=headers, encode_chunked=True)
        else:
            conn.request("POST", path, body=data, headers=headers)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed before the whole body was sent: read the answer
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, resp.getheaders(), json.loads(body)


@pytest.fixture
def server(tmp_path):
    with gunicorn(tmp_path) as g:
        yield g


@pytest.fixture
def client_token():
    make_namespace("support")
    client, token = make_client("client-1", "client", ["support"])
    return client, token


def session(oid, request_id="r-1", **extra):
    return {
        "session_id": "conv-1",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 100,
        "injections": [{"object_id": str(oid), "token_cost": 10}],
        "signals": [{"object_id": str(oid), "signal_type": "CONFIRMED"}],
        **extra,
    }


def test_a_chunked_session_is_read_and_recorded(server, client_token):
    client, token = client_token
    obj = make_object(client)
    status, headers, body = send(
        server.port, "/api/v1/feedback-sessions", json.dumps(session(obj.pk)).encode(), token
    )
    assert status == 201, body
    assert body["request_id"] == "r-1" and body["injected_object_ids"] == [str(obj.pk)]
    assert FeedbackSession.objects.count() == 1
    # a chunked batch too, in 64 KiB chunks, with the items' framing split across chunks
    batch = [session(obj.pk, f"b-{i}", context_text="x" * 5000) for i in range(100)]
    status, _, body = send(
        server.port, "/api/v1/feedback-sessions/batch", json.dumps(batch).encode(), token
    )
    assert status == 207 and [r["status"] for r in body["results"]] == [201] * 100
    assert FeedbackSession.objects.count() == 101


def test_a_20_mb_chunked_body_is_413_and_writes_nothing(server, client_token):
    client, token = client_token
    obj = make_object(client)
    before = (FeedbackSession.objects.count(), Operation.objects.count())
    filler = "x" * (20 * 1024 * 1024)
    data = json.dumps(session(obj.pk, context_text=filler)).encode()
    status, _, body = send(server.port, "/api/v1/feedback-sessions", data, token)
    assert status == 413, body
    assert body["error"]["code"] == "request_too_large"
    assert (FeedbackSession.objects.count(), Operation.objects.count()) == before
    # just over the limit is refused, the limit itself is not (it is then a 400: too long a text)
    head = json.dumps(session(obj.pk, context_text="")).encode()[:-1] + b', "response_text": "'
    over = head + b"y" * (LIMIT - len(head) - 2) + b'"}'
    assert len(over) == LIMIT
    status, _, body = send(server.port, "/api/v1/feedback-sessions", over, token)
    assert status == 400 and body["error"]["code"] == "validation_error", body
    status, _, body = send(server.port, "/api/v1/feedback-sessions", over + b" " * 20, token)
    assert status == 413, body
    assert (FeedbackSession.objects.count(), Operation.objects.count()) == before


def test_a_body_with_content_length_still_works_and_is_limited(server, client_token):
    client, token = client_token
    obj = make_object(client)
    data = json.dumps(session(obj.pk)).encode()
    status, _, body = send(server.port, "/api/v1/feedback-sessions", data, token, chunked=False)
    assert status == 201, body
    big = json.dumps(session(obj.pk, "r-2", context_text="x" * (LIMIT + 1))).encode()
    status, _, body = send(server.port, "/api/v1/feedback-sessions", big, token, chunked=False)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert FeedbackSession.objects.count() == 1
