"""The dashboard's session page says when a session came from an OpenTelemetry trace."""

from __future__ import annotations

from django.test import Client

from feedback.models import FeedbackSession
from otlp.tasks import flush_traces
from rms.models import ApiClient
from tests.otlp.conftest import TEXTS, Spans, export


def test_the_session_page_shows_the_trace_id(env):
    spans = Spans()
    with (
        spans.tracer.start_as_current_span("agent") as root,
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
    export(env.exporter(), spans.finished())
    assert flush_traces() == 1
    trace_id = format(root.get_span_context().trace_id, "032x")
    session = FeedbackSession.objects.get()
    page = Client()
    page.force_login(ApiClient.objects.get(name="operator-1").user)
    html = page.get(f"/sessions/{session.pk}/").content.decode()
    assert f'data-trace-id="{trace_id}"' in html
    assert "From OpenTelemetry trace" in html
