"""OTLP ingestion services: receive an export's spans, assemble a complete trace into a session.

``spans_receive`` — one transaction: the export's spans about memory (and its root spans) are
stored under their trace's row, locked in primary-key order, so a span that got a 200 is durable
before the answer leaves. Spans for a trace already written are refused (``trace_closed``),
except a re-export of spans it already holds, which adds nothing. A trace whose root span has
arrived is queued for assembly after commit; a broker outage only delays it (beat's flush).

``trace_assemble`` — claims an open trace with a compare-and-swap, builds the session body
(``otlp.mapping``) and records it through the same ingestion service as
``POST /feedback-sessions`` (``feedback.ingest``), whose request id is derived from the trace:
running it twice stores one session. ``traces_flush`` (beat) assembles the traces that are
complete or quiet, and re-opens claims left by a worker that died.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from feedback import ingest
from feedback.api.views import count_ingested, session_item
from otlp import mapping, telemetry
from otlp.models import OtlpSpan, OtlpTrace
from rms.errors import DomainError
from rms.models import ApiClient, MemoryObject, Namespace
from taskruns import enqueue

logger = logging.getLogger(__name__)

#: An ``assembling`` claim older than this belonged to a worker that died: it is re-opened.
STALE_CLAIM = timedelta(minutes=10)
#: Traces one flush assembles at most (the next beat takes the rest).
FLUSH_LIMIT = 5000


@dataclass
class Receipt:
    received: int = 0
    mapped: int = 0
    rejected: Counter = field(default_factory=Counter)

    @property
    def rejected_count(self) -> int:
        return sum(self.rejected.values())

    def message(self) -> str:
        if not self.rejected:
            return ""
        reasons = ", ".join(f"{reason} ({n})" for reason, n in sorted(self.rejected.items()))
        return f"{self.rejected_count} span(s) rejected: {reasons}. See docs/OTEL.md."


def spans_receive(*, client: ApiClient, message) -> Receipt:
    """Store the spans of one decoded ExportTraceServiceRequest; one transaction. Returns the
    counts the OTLP answer reports (``partial_success``)."""
    receipt = Receipt()
    spans: list[mapping.SpanFacts] = []
    for resource_spans in message.resource_spans:
        resource = mapping.attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                receipt.received += 1
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    receipt.rejected["invalid_span"] += 1
                    continue
                facts = mapping.extract(span, resource)
                if facts is not None:
                    spans.append(facts)
    kept = _resolve(client, spans, receipt)
    if kept:
        _store(client, kept, receipt)
    _count(receipt)
    return receipt


def _count(receipt: Receipt) -> None:
    telemetry.SPANS_RECEIVED.inc(receipt.received)
    telemetry.SPANS_MAPPED.inc(receipt.mapped)
    for reason, n in receipt.rejected.items():
        telemetry.SPANS_REJECTED.labels(reason).inc(n)


@dataclass
class _Kept:
    facts: mapping.SpanFacts
    namespace: str | None
    stored: dict


def _resolve(client: ApiClient, spans: list[mapping.SpanFacts], receipt: Receipt) -> list[_Kept]:
    """Each span's namespace and objects; spans about memory that cannot be used are rejected
    with a reason, root spans that are not about memory are kept for their facts only."""
    relevant = [s for s in spans if s.relevant or s.errors]
    linked = sorted(client.linked_namespace_names) if relevant else []
    names = {s.namespace for s in relevant if s.namespace}
    if client.sees_all_namespaces and names:
        allowed = set(Namespace.objects.filter(name__in=names).values_list("name", flat=True))
    else:
        allowed = set(linked)
    refs = {ref: mapping.as_uuid(ref) for ref in mapping.references(relevant)}
    uuids = {u for u in refs.values() if u is not None}
    found = dict(
        MemoryObject.objects.filter(pk__in=uuids).values_list("pk", "namespace__name")
        if uuids
        else ()
    )
    kept: list[_Kept] = []
    for facts in spans:
        if not (facts.relevant or facts.errors):
            kept.append(_Kept(facts, None, mapping.facts_to_json(facts, {})))
            continue
        namespace = facts.namespace or (linked[0] if len(linked) == 1 else None)
        if namespace is None:
            receipt.rejected["no_namespace"] += 1
            continue
        if namespace not in allowed:
            receipt.rejected["unknown_namespace"] += 1
            continue
        objects = {}
        for ref in mapping.references([facts]):
            u = refs[ref]
            if u is not None and found.get(u) == namespace:
                objects[ref] = str(u)
        stored = mapping.facts_to_json(facts, objects)
        if not (stored["docs"] or stored["signals"] or stored["output"] is not None):
            reason = "unknown_object" if facts.docs or facts.signals else facts.errors[0]
            receipt.rejected[reason] += 1
            continue
        kept.append(_Kept(facts, namespace, stored))
    return kept


def _store(client: ApiClient, kept: list[_Kept], receipt: Receipt) -> None:
    now = timezone.now()
    trace_ids = sorted({k.facts.trace_id for k in kept})
    complete: list[int] = []
    with transaction.atomic():
        first_namespace: dict[str, str] = {}
        for k in kept:
            if k.namespace is not None:
                first_namespace.setdefault(k.facts.trace_id, k.namespace)
        OtlpTrace.objects.bulk_create(
            [
                OtlpTrace(
                    client=client,
                    trace_id=t,
                    namespace=first_namespace.get(t, ""),
                    request_id=mapping.request_id(t, first_namespace[t])
                    if t in first_namespace
                    else "",
                    first_span_at=now,
                    last_span_at=now,
                )
                for t in trace_ids
            ],
            ignore_conflicts=True,
        )
        traces = {
            t.trace_id: t
            for t in OtlpTrace.objects.filter(client=client, trace_id__in=trace_ids)
            .order_by("pk")
            .select_for_update(of=("self",))
        }
        closed = [t.pk for t in traces.values() if t.state != OtlpTrace.OPEN]
        held = set(
            OtlpSpan.objects.filter(trace_id__in=closed).values_list("trace_id", "span_id")
            if closed
            else ()
        )
        rows: list[OtlpSpan] = []
        touched: set[str] = set()
        for k in kept:
            trace = traces[k.facts.trace_id]
            about_memory = k.namespace is not None
            if trace.state != OtlpTrace.OPEN:
                if about_memory and (trace.pk, k.facts.span_id) not in held:
                    receipt.rejected["trace_closed"] += 1
                continue
            if about_memory:
                if trace.namespace and trace.namespace != k.namespace:
                    receipt.rejected["namespace_mismatch"] += 1
                    continue
                if not trace.namespace:  # a trace whose root-only row came first
                    trace.namespace = k.namespace
                    trace.request_id = mapping.request_id(trace.trace_id, k.namespace)
                    OtlpTrace.objects.filter(pk=trace.pk).update(
                        namespace=trace.namespace, request_id=trace.request_id
                    )
                trace.has_facts = True
                receipt.mapped += 1
            trace.root_ended = trace.root_ended or k.facts.is_root
            trace.last_span_at = now
            touched.add(trace.trace_id)
            rows.append(
                OtlpSpan(trace=trace, span_id=k.facts.span_id, facts=k.stored, received_at=now)
            )
        OtlpSpan.objects.bulk_create(rows, ignore_conflicts=True)
        changed = [traces[t] for t in sorted(touched)]
        # one UPDATE per distinct set of values (a handful), not one per trace
        groups: dict[tuple, list[int]] = {}
        for t in changed:
            groups.setdefault((t.has_facts, t.root_ended), []).append(t.pk)
        for (has_facts, root_ended), pks in groups.items():
            OtlpTrace.objects.filter(pk__in=pks).update(
                has_facts=has_facts, root_ended=root_ended, last_span_at=now
            )
        complete = [t.pk for t in changed if t.root_ended and t.has_facts]
        if complete:
            # robust: the spans are committed whatever happens to the broker; beat's flush
            # assembles a complete trace whose message was lost.
            transaction.on_commit(lambda: _enqueue(complete), robust=True)


def _enqueue(trace_pks: list[int]) -> None:
    """One message for the traces an export completed (a 512-span export may complete 100)."""
    enqueue.publish(ASSEMBLE_TRACES, (trace_pks,))


#: The registered name of ``otlp.tasks.assemble_traces``: queued by name, so this module need
#: not import the task module that imports it.
ASSEMBLE_TRACES = "otlp.tasks.assemble_traces"


def trace_assemble(*, trace_pk: int) -> str | None:
    """Write the session of one trace, once (``traces_assemble`` of one). Returns the trace's
    new state, or None when there was nothing to claim."""
    states = traces_assemble(trace_pks=[trace_pk])
    return states.get(trace_pk)


def traces_assemble(*, trace_pks: list[int]) -> dict[int, str]:
    """Write the sessions of these traces, each once. Each trace is claimed with a
    compare-and-swap (``open`` → ``assembling``: a second call, or a redelivered message, finds
    nothing to claim); their bodies go through ``feedback.ingest.record_sessions`` — the batch
    endpoint's service, one transaction a chunk of ``ingest.MAX_BATCH`` — then each trace is
    marked ``done`` (with its session, or none when it had nothing to record) or ``failed`` with
    the refusal. A crash in between leaves ``assembling`` claims that ``traces_flush``
    re-opens; the re-run answers from the stored sessions (same request ids, same bodies).
    Returns the new state of each trace claimed."""
    token = uuid.uuid4().hex
    OtlpTrace.objects.filter(pk__in=trace_pks, state=OtlpTrace.OPEN).update(
        state=OtlpTrace.ASSEMBLING, claimed_at=timezone.now(), claim=token
    )
    claimed = sorted(OtlpTrace.objects.filter(claim=token).values_list("pk", flat=True))
    states: dict[int, str] = {}
    for start in range(0, len(claimed), ingest.MAX_BATCH):
        chunk = claimed[start : start + ingest.MAX_BATCH]
        try:
            states.update(_assemble(chunk))
        except Exception:
            OtlpTrace.objects.filter(pk__in=claimed, state=OtlpTrace.ASSEMBLING).update(
                state=OtlpTrace.OPEN, claimed_at=None, claim=""
            )
            raise
    return states


def _assemble(pks: list[int]) -> dict[int, str]:
    traces = {t.pk: t for t in OtlpTrace.objects.select_related("client").filter(pk__in=pks)}
    spans: dict[int, list[mapping.SpanFacts]] = {pk: [] for pk in traces}
    for trace_pk, span_id, facts in OtlpSpan.objects.filter(trace_id__in=pks).values_list(
        "trace_id", "span_id", "facts"
    ):
        spans[trace_pk].append(mapping.facts_from_json(traces[trace_pk].trace_id, span_id, facts))
    states: dict[int, str] = {}
    by_client: dict[int, list[tuple[OtlpTrace, ingest.Item]]] = {}
    empty: list[int] = []
    _plan(pks, traces, spans, states, by_client, empty)
    _finish(empty, OtlpTrace.DONE)
    for pairs in by_client.values():
        client = pairs[0][0].client
        answers = ingest.record_sessions(client=client, items=[item for _, item in pairs])
        count_ingested([a for a in answers if not isinstance(a[1], DomainError)])
        written = []
        for (trace, _), (_, answer) in zip(pairs, answers, strict=True):
            if isinstance(answer, DomainError):
                states[trace.pk] = _refused(trace, answer)
            else:
                written.append(trace.pk)
                states[trace.pk] = OtlpTrace.DONE
        telemetry.TRACES_WRITTEN.labels("session").inc(len(written))
        _finish(written, OtlpTrace.DONE)
    return states


def _plan(pks, traces, spans, states, by_client, empty) -> None:
    """Each trace's body; a trace with nothing to record is marked done at once."""
    for pk in pks:
        trace = traces[pk]
        body = None
        if trace.namespace:
            objects = {ref: ref for ref in mapping.references(spans[pk])}
            body = mapping.session_body(
                trace_id=trace.trace_id, namespace=trace.namespace, spans=spans[pk], objects=objects
            )
        if body is None:
            telemetry.TRACES_WRITTEN.labels("empty").inc()
            states[pk] = OtlpTrace.DONE
            empty.append(pk)
        else:
            by_client.setdefault(trace.client_id, []).append((trace, session_item(body)))


def _refused(trace: OtlpTrace, answer: DomainError) -> str:
    logger.warning("otlp: trace %s refused: %s", trace.trace_id, answer.message)
    telemetry.TRACES_WRITTEN.labels("failed").inc()
    fields = f" {answer.fields}" if answer.fields else ""
    return _finish([trace.pk], OtlpTrace.FAILED, error=f"{answer.code}: {answer.message}{fields}")


def _finish(pks: list[int], state: str, *, error: str = "") -> str:
    OtlpTrace.objects.filter(pk__in=pks, state=OtlpTrace.ASSEMBLING).update(
        state=state, error=error[:2000], finished_at=timezone.now()
    )
    return state


def traces_flush(*, now: datetime | None = None) -> int:
    """Assemble the open traces that are complete (root span arrived) or quiet (no span for
    ``RMS_OTLP_QUIET_SECONDS``), oldest first, at most FLUSH_LIMIT a call (the next beat takes
    the rest); re-open stale claims first. Returns how many traces were assembled."""
    now = now or timezone.now()
    OtlpTrace.objects.filter(state=OtlpTrace.ASSEMBLING, claimed_at__lt=now - STALE_CLAIM).update(
        state=OtlpTrace.OPEN, claimed_at=None, claim=""
    )
    quiet = now - timedelta(seconds=settings.RMS_OTLP_QUIET_SECONDS)
    due = list(
        OtlpTrace.objects.filter(state=OtlpTrace.OPEN)
        .filter(Q(root_ended=True, has_facts=True) | Q(last_span_at__lte=quiet))
        .order_by("last_span_at", "pk")
        .values_list("pk", flat=True)[:FLUSH_LIMIT]
    )
    return len(traces_assemble(trace_pks=due))
