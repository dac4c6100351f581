"""Traces split across exports with the worker stopped, then started: every span that got a 200
ends up in exactly one session. A real ``celery worker`` on the test database and broker."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from feedback.models import FeedbackSession, InjectionEvent
from otlp import mapping
from otlp.models import OtlpTrace
from otlp.services import traces_flush
from tests.feedback.conftest import start_worker, stop_worker, tasks_sent_to, worker_database_url
from tests.otlp.conftest import TEXTS, Spans, export


def retriever(tracer, oid: str, text: str, name: str = "retrieve"):
    return tracer.start_as_current_span(
        name,
        attributes={
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.id": oid,
            "retrieval.documents.0.document.content": text,
        },
    )


def wait_for(condition, worker, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        worker.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"not done after {timeout} s:\n{worker.log_tail()}")
        time.sleep(0.1)


def test_spans_exported_while_the_worker_is_down_become_one_session_once_it_starts(env, tmp_path):
    spans = Spans()
    tracer = spans.tracer
    with tracer.start_as_current_span("agent", attributes={"session.id": "w-1"}) as root:
        for oid, text in zip(env.ids, TEXTS, strict=True):
            with retriever(tracer, oid, text):
                pass
    trace_id = format(root.get_span_context().trace_id, "032x")
    # a second trace whose root never arrives (its process died): written once it is quiet
    orphan = Spans()
    with (
        orphan.tracer.start_as_current_span("agent"),
        retriever(orphan.tracer, env.ids[0], TEXTS[0]),
    ):
        pass
    orphan_spans = orphan.finished()[:1]
    orphan_id = format(orphan_spans[0].context.trace_id, "032x")

    queue = f"rms-test-{uuid.uuid4().hex[:12]}"
    with tasks_sent_to(queue):
        finished = spans.finished()
        exporter = env.exporter()
        for part in (finished[:1], finished[1:3], finished[3:]):  # the root comes last
            export(exporter, part)
        export(exporter, orphan_spans)
        assert not FeedbackSession.objects.exists()  # queued; no worker yet
        assert OtlpTrace.objects.get(trace_id=trace_id).state == OtlpTrace.OPEN

        worker = start_worker(queue, tmp_path / "worker.log", database_url=worker_database_url())
        try:
            done = OtlpTrace.objects.filter(trace_id=trace_id, state=OtlpTrace.DONE)
            wait_for(done.exists, worker)
        finally:
            stop_worker(worker)

    session = FeedbackSession.objects.get(request_id=mapping.request_id(trace_id, "support"))
    ranks = InjectionEvent.objects.filter(session=session).order_by("rank_position")
    assert [str(r.object_id) for r in ranks] == env.ids
    assert session.session_id == "w-1"
    assert OtlpTrace.objects.get(trace_id=orphan_id).state == OtlpTrace.OPEN

    # beat's flush: the orphan is written once quiet; the done trace is not written again
    assert traces_flush(now=timezone.now()) == 0
    assert traces_flush(now=timezone.now() + timedelta(seconds=31)) == 1
    assert traces_flush(now=timezone.now() + timedelta(seconds=62)) == 0
    assert FeedbackSession.objects.count() == 2
    orphan_session = FeedbackSession.objects.get(
        request_id=mapping.request_id(orphan_id, "support")
    )
    assert orphan_session.session_id == orphan_id  # no session.id: the trace id


def test_a_claim_left_by_a_dead_worker_is_reopened_and_the_session_written_once(env):
    spans = Spans()
    with spans.tracer.start_as_current_span("agent"), retriever(spans.tracer, env.ids[0], TEXTS[0]):
        pass
    export(env.exporter(), spans.finished())
    trace = OtlpTrace.objects.get()
    # a worker claimed it and died before writing
    OtlpTrace.objects.filter(pk=trace.pk).update(
        state=OtlpTrace.ASSEMBLING, claimed_at=timezone.now() - timedelta(minutes=11)
    )
    assert traces_flush() == 1
    assert traces_flush() == 0
    assert FeedbackSession.objects.count() == 1
    written = OtlpTrace.objects.get()
    assert written.state == OtlpTrace.DONE
    # a worker that died after the session committed, before it marked the trace done
    OtlpTrace.objects.filter(pk=trace.pk).update(
        state=OtlpTrace.ASSEMBLING, claimed_at=timezone.now() - timedelta(minutes=11)
    )
    assert traces_flush() == 1
    assert FeedbackSession.objects.count() == 1
    again = OtlpTrace.objects.get()
    assert again.state == OtlpTrace.DONE and again.request_id == written.request_id
