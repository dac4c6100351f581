"""The real OTLP/HTTP exporter feeding the loop: a trace split over three exports becomes one
session; a re-export adds nothing; spans that cannot be used are counted with their reason."""

from __future__ import annotations

import base64
import gzip
import json

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from feedback.models import FeedbackSession, InjectionEvent
from otlp import mapping
from otlp.models import OtlpSpan, OtlpTrace
from otlp.tasks import flush_traces
from tests.otlp.conftest import GZIP, TEXTS, Spans, export, tokens

RESPONSE = "Alice prefers Python for scripting, so write a Python script."


def agent_trace(spans: Spans, ids: list[str], *, session="conv-7", signal="CONFIRMED"):
    """A root span, a retriever (OpenInference), a model call and an explicit feedback span."""
    tracer = spans.tracer
    with tracer.start_as_current_span("agent", attributes={"session.id": session}) as root:
        docs = {}
        for i, (oid, text, score) in enumerate(zip(ids, TEXTS, (0.91, 0.52, None), strict=True)):
            docs[f"retrieval.documents.{i}.document.id"] = oid
            docs[f"retrieval.documents.{i}.document.content"] = text
            if score is not None:
                docs[f"retrieval.documents.{i}.document.score"] = score
        with tracer.start_as_current_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "input.value": "which language for a script?",
                **docs,
            },
        ):
            pass
        with tracer.start_as_current_span("tool", attributes={"tool.name": "calculator"}):
            pass
        with tracer.start_as_current_span(
            "llm",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": RESPONSE,
            },
        ):
            pass
        with tracer.start_as_current_span("feedback", attributes={f"rms.signal.{ids[2]}": signal}):
            pass
    return format(root.get_span_context().trace_id, "032x")


def the_session(trace_id: str) -> FeedbackSession:
    return FeedbackSession.objects.get(request_id=mapping.request_id(trace_id, "support"))


def injections(session):
    rows = InjectionEvent.objects.filter(session=session).order_by("rank_position")
    return [(str(r.object_id), r.rank_position, r.token_cost, r.composite_score) for r in rows]


@pytest.mark.parametrize("compression", [None, GZIP], ids=["plain", "gzip"])
def test_a_trace_split_over_three_exports_becomes_one_session(env, compression):
    spans = Spans(**{"service.name": "agent"})
    trace_id = agent_trace(spans, env.ids)
    finished = spans.finished()
    assert [s.name for s in finished] == ["retrieve", "tool", "llm", "feedback", "agent"]
    exporter = env.exporter(compression=compression)
    export(exporter, finished[:2])
    export(exporter, finished[2:4])
    flush_traces()  # the root has not arrived: nothing is written yet
    assert not FeedbackSession.objects.exists()
    export(exporter, finished[4:])
    assert flush_traces() == 1

    session = the_session(trace_id)
    assert session.session_id == "conv-7"
    assert session.context_text == "which language for a script?"
    assert injections(session) == [
        (env.ids[0], 1, tokens(TEXTS[0]), 0.91),
        (env.ids[1], 2, tokens(TEXTS[1]), 0.52),
        (env.ids[2], 3, tokens(TEXTS[2]), None),
    ]
    record = session.record
    by_type = {}
    for s in record["signals"]:
        by_type.setdefault(s["signal_type"], set()).add(s["object_id"])
    assert by_type["CONFIRMED"] == {env.ids[2]}  # the explicit feedback span
    assert by_type["REFERENCED"] == {env.ids[0]}  # the response, analysed
    assert set(record["unused_ids"]) == {env.ids[1]}
    assert record["tokens_used"] == sum(tokens(t) for t in TEXTS)
    trace = OtlpTrace.objects.get(trace_id=trace_id)
    assert trace.state == OtlpTrace.DONE and trace.request_id == session.request_id
    # the tool span is about nothing the loop uses: not stored
    assert OtlpSpan.objects.filter(trace=trace).count() == 4


def test_exporting_the_same_spans_again_adds_nothing(env):
    spans = Spans()
    trace_id = agent_trace(spans, env.ids)
    exporter = env.exporter()
    export(exporter, spans.finished())
    flush_traces()
    before = (
        FeedbackSession.objects.count(),
        OtlpSpan.objects.count(),
        injections(the_session(trace_id)),
    )
    rejected_before = env.metric("rms_otlp_spans_rejected", reason="trace_closed")
    export(exporter, spans.finished())  # a retried export, after the session was written
    export(env.exporter(compression=GZIP), spans.finished())
    assert flush_traces() == 0
    after = (
        FeedbackSession.objects.count(),
        OtlpSpan.objects.count(),
        injections(the_session(trace_id)),
    )
    assert after == before
    assert env.metric("rms_otlp_spans_rejected", reason="trace_closed") == rejected_before


def test_a_retried_export_before_assembly_is_stored_once(env):
    spans = Spans()
    trace_id = agent_trace(spans, env.ids)
    exporter = env.exporter()
    export(exporter, spans.finished()[:3])
    export(exporter, spans.finished()[:3])  # the same export again (a retry after a timeout)
    export(exporter, spans.finished())
    assert flush_traces() == 1
    assert FeedbackSession.objects.count() == 1
    assert len(injections(the_session(trace_id))) == 3


@pytest.mark.parametrize("hex_ids", [False, True], ids=["base64-ids", "hex-ids"])
@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_the_json_encoding_gives_the_same_session(env, hex_ids, gzipped):
    spans = Spans()
    trace_id = agent_trace(spans, env.ids)
    message = encode_spans(spans.finished())
    document = json_format.MessageToDict(message)
    if hex_ids:  # OTLP/JSON proper writes ids as hex
        for rs in document["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
    body = json.dumps(document).encode()
    headers = {"Authorization": f"Token {env.client}", "Content-Type": "application/json"}
    if gzipped:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    resp = httpx.post(env.endpoint, content=body, headers=headers)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert resp.json() == {}  # full success: an empty ExportTraceServiceResponse
    assert flush_traces() == 1
    session = the_session(trace_id)
    assert [i[0] for i in injections(session)] == env.ids
    assert session.session_id == "conv-7"


def test_spans_of_an_unknown_object_or_namespace_are_rejected_with_their_reason(env):
    spans = Spans()
    tracer = spans.tracer
    with tracer.start_as_current_span("agent"):
        with tracer.start_as_current_span(
            "retrieve-unknown",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": "0b6f5a8e-0000-4000-8000-000000000000",
                "retrieval.documents.0.document.content": "no such memory",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "retrieve-elsewhere",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "rms.namespace": "billing",  # a namespace this token cannot see
                "retrieval.documents.0.document.id": env.other_id,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "retrieve-ok",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": env.ids[0],
                "retrieval.documents.0.document.content": TEXTS[0],
            },
        ):
            pass
    before = {
        r: env.metric("rms_otlp_spans_rejected", reason=r)
        for r in ("unknown_object", "unknown_namespace")
    }
    received = env.metric("rms_otlp_spans_received")
    mapped = env.metric("rms_otlp_spans_mapped")
    resp = httpx.post(
        env.endpoint,
        content=encode_spans(spans.finished()).SerializeToString(),
        headers={"Authorization": f"Token {env.client}", "Content-Type": "application/x-protobuf"},
    )
    assert resp.status_code == 200
    answer = ExportTraceServiceResponse.FromString(resp.content)
    assert answer.partial_success.rejected_spans == 2
    assert "unknown_object (1)" in answer.partial_success.error_message
    assert "unknown_namespace (1)" in answer.partial_success.error_message
    assert (
        env.metric("rms_otlp_spans_rejected", reason="unknown_object")
        == before["unknown_object"] + 1
    )
    assert (
        env.metric("rms_otlp_spans_rejected", reason="unknown_namespace")
        == before["unknown_namespace"] + 1
    )
    assert env.metric("rms_otlp_spans_received") == received + 4
    assert env.metric("rms_otlp_spans_mapped") == mapped + 1
    assert flush_traces() == 1
    assert [i[0] for i in injections(FeedbackSession.objects.get())] == [env.ids[0]]


def test_a_token_of_several_namespaces_needs_rms_namespace(env):
    spans = Spans()
    with spans.tracer.start_as_current_span(
        "retrieve",
        attributes={
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.id": env.other_id,
        },
    ):
        pass
    export(env.exporter(token=env.multi), spans.finished())
    assert not OtlpSpan.objects.exists()
    named = Spans(**{"rms.namespace": "billing"})  # on the resource this time
    with named.tracer.start_as_current_span(
        "retrieve",
        attributes={
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.metadata": f'{{"rms_object_id": "{env.other_id}"}}',
            "retrieval.documents.0.document.content": "Billing fact",
        },
    ):
        pass
    export(env.exporter(token=env.multi), named.finished())
    assert flush_traces() == 1
    session = FeedbackSession.objects.get()
    assert session.namespace_scope == ["billing"]
    assert [i[0] for i in injections(session)] == [env.other_id]
