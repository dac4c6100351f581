"""Bad exports get a clear 4xx in the encoding of the request (a google.rpc.Status for
protobuf, the contract's error shape for JSON), and nothing is written."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from feedback.models import FeedbackSession
from otlp.models import OtlpSpan, OtlpTrace
from tests.otlp.conftest import TEXTS, Spans

PROTOBUF = "application/x-protobuf"


def nothing_written() -> bool:
    return not (
        OtlpTrace.objects.exists() or OtlpSpan.objects.exists() or FeedbackSession.objects.exists()
    )


def post(env, body: bytes, content_type: str = PROTOBUF, token: str | None = "client", **headers):
    if token == "client":
        token = env.client
    if token:
        headers["Authorization"] = f"Token {token}"
    return httpx.post(
        env.endpoint, content=body, headers={"Content-Type": content_type, **headers}, timeout=60
    )


def status_of(resp) -> status_pb2.Status:
    assert resp.headers["content-type"] == PROTOBUF
    return status_pb2.Status.FromString(resp.content)


def a_good_body(env) -> bytes:
    spans = Spans()
    with (
        spans.tracer.start_as_current_span("agent"),
        spans.tracer.start_as_current_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": env.ids[0],
                "retrieval.documents.0.document.content": TEXTS[0],
            },
        ),
    ):
        pass
    return encode_spans(spans.finished()).SerializeToString()


def test_an_undecodable_protobuf_body_is_400(env):
    resp = post(env, b"\xff\xfe not a protobuf message \x00\x01")
    assert resp.status_code == 400
    assert "ExportTraceServiceRequest" in status_of(resp).message
    assert status_of(resp).code == 3  # INVALID_ARGUMENT
    assert nothing_written()


def test_a_truncated_protobuf_body_is_400(env):
    body = a_good_body(env)
    resp = post(env, body[: len(body) - 7])
    assert resp.status_code == 400, resp.content
    assert "not an ExportTraceServiceRequest" in status_of(resp).message
    assert nothing_written()


def test_a_truncated_gzip_body_is_400(env):
    resp = post(env, gzip.compress(a_good_body(env))[:-10], **{"Content-Encoding": "gzip"})
    assert resp.status_code == 400
    assert "gzip" in status_of(resp).message
    assert nothing_written()


def gzip_bomb(megabytes: int) -> bytes:
    """``megabytes`` MiB of zeros gzipped (about a thousandth of that), made a chunk at a time."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    parts = [packer.compress(zeros) for _ in range(megabytes)]
    return b"".join(parts) + packer.flush()


def test_a_gzip_bomb_is_refused_without_being_inflated(env):
    bomb = gzip_bomb(512)
    assert len(bomb) < 1024 * 1024  # well under the request size limit as sent
    tracemalloc.start()  # the live server runs in this process: its allocations are seen
    try:
        resp = post(env, bomb, **{"Content-Encoding": "gzip"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert resp.status_code == 413
    assert "larger than" in status_of(resp).message
    assert peak < 64 * 1024 * 1024  # the 512 MiB were never held: the cap is 16 MiB
    assert nothing_written()


def test_json_with_wrong_types_is_400_in_the_contracts_shape(env):
    body = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5, "kind": "nope"}]}]}]}'
    resp = post(env, body, "application/json")
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "malformed_json" and "OTLP/JSON" in error["message"]
    assert post(env, b"[1, 2]", "application/json").status_code == 400
    assert post(env, b"{not json", "application/json").status_code == 400
    assert nothing_written()


def test_100000_spans_in_one_request_are_refused_with_a_clear_message(env):
    message = ExportTraceServiceRequest()
    spans = message.resource_spans.add().scope_spans.add().spans
    for i in range(100_000):
        span = spans.add()
        span.trace_id = i.to_bytes(16, "big")
        span.span_id = (i + 1).to_bytes(8, "big")
        span.name = "s"
    resp = post(env, message.SerializeToString())
    assert resp.status_code == 413
    assert "at most 10000 spans" in status_of(resp).message
    assert nothing_written()


def test_another_content_type_is_415_and_another_encoding_too(env):
    resp = post(env, b"hello", "text/plain")
    assert resp.status_code == 415
    assert resp.json()["error"]["code"] == "unsupported_media_type"
    resp = post(env, a_good_body(env), **{"Content-Encoding": "br"})
    assert resp.status_code == 415
    assert nothing_written()


def test_no_token_is_401_and_a_reader_role_is_403_in_protobuf(env):
    resp = post(env, a_good_body(env), token=None)
    assert resp.status_code == 401
    assert resp.headers["WWW-Authenticate"] == "Token"
    assert status_of(resp).code == 16  # UNAUTHENTICATED
    resp = post(env, a_good_body(env), token=env.operator)
    assert resp.status_code == 403
    assert status_of(resp).code == 7  # PERMISSION_DENIED
    resp = post(env, b"{}", "application/json", token="wrong")
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "authentication_failed"
    assert nothing_written()


@pytest.fixture
def one_request_a_minute():
    from rms.api.throttling import ClientRateThrottle

    ClientRateThrottle.THROTTLE_RATES = {"client": "1/min"}
    try:
        yield
    finally:
        del ClientRateThrottle.THROTTLE_RATES


def test_a_throttled_export_is_429_with_retry_after(env, one_request_a_minute):
    assert post(env, a_good_body(env)).status_code == 200
    resp = post(env, a_good_body(env))
    assert resp.status_code == 429
    assert int(resp.headers["Retry-After"]) > 0
    assert status_of(resp).code == 8  # RESOURCE_EXHAUSTED
