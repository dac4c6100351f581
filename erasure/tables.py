"""What one erasure rewrites, table by table (docs/DECISIONS.md "Erasure").

Each function takes the subject's scope and the ``rms.redaction.Rule`` and rewrites the rows it
selects in place, inside the caller's transaction; each returns how many rows changed. The
operation log is rewritten by ``redact_operations``, which also returns, for each changed
operation, its original hash and the residual digest the ERASURE receipt lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from delivery.models import WebhookDelivery
from feedback import session_record
from feedback.models import FeedbackSession, SignalRecord
from otlp.models import OtlpSpan, OtlpTrace
from rms import store
from rms.models import (
    ChainCheckpoint,
    IdempotencyRecord,
    MemoryObject,
    Namespace,
    Operation,
    Relationship,
    SessionTally,
)
from rms.oplog import row_for_hash
from rms.redaction import (
    ERASURE_OP,
    OBJECT_ERASED_OP,
    Rule,
    redact_fold,
    redact_op,
    redact_session,
    redact_signal,
    rename_tally_keys,
    residual_digest,
)

#: Rows read and written per round trip (the store writes a batch with one COPY).
BATCH = 5000


@dataclass
class Scope:
    """The rows one subject reaches in one namespace."""

    namespace: Namespace
    operations: QuerySet
    objects: QuerySet  # objects whose content is erased (each gets an OBJECT_ERASED)
    sessions: QuerySet
    signals: QuerySet
    relationships: QuerySet
    actors: frozenset[str] | None = field(default_factory=frozenset)


def scope_of(kind: str, subject: str, ns: Namespace) -> Scope:
    ops = Operation.objects.filter(namespace=ns.name).exclude(
        op_type__in=(ERASURE_OP, OBJECT_ERASED_OP)
    )
    objects = MemoryObject.objects.filter(namespace=ns)
    in_ns_sessions = FeedbackSession.objects.filter(scopes__namespace=ns).distinct()
    signals = SignalRecord.objects.filter(namespace=ns)
    rels = Relationship.objects.filter(namespace=ns) if _has_ns(Relationship) else None
    none_rel = Relationship.objects.none()
    if kind == "object":
        return Scope(
            ns, ops.filter(target_id=subject), objects.filter(pk=subject),
            FeedbackSession.objects.none(), signals.filter(object_id=subject), none_rel,
        )  # fmt: skip
    if kind == "actor":
        return Scope(
            ns, ops.filter(actor_id=subject), objects.filter(created_by=subject),
            FeedbackSession.objects.none(), signals.filter(actor_id=subject),
            (rels if rels is not None else Relationship.objects.all()).filter(created_by=subject),
            frozenset({subject}),
        )  # fmt: skip
    if kind == "session":
        return Scope(
            ns, ops.filter(session_id=subject), MemoryObject.objects.none(),
            in_ns_sessions.filter(session_id=subject), signals.filter(session_id=subject),
            none_rel,
        )  # fmt: skip
    return Scope(
        ns, ops, objects, in_ns_sessions, signals,
        rels if rels is not None else none_rel, None,
    )  # fmt: skip


def _has_ns(model) -> bool:
    return any(f.name == "namespace" for f in model._meta.get_fields())


def rule_for(kind: str, scope: Scope, key: bytes) -> Rule:
    """Texts always go. Evidence ids are renamed only where whole object chains are rewritten
    (object, namespace): every stored state that carries them changes with them, so replay
    still agrees; an actor's or a session's signals leave the objects' evidence as it is."""
    return Rule(key=key, texts=True, actors=scope.actors, evidence=kind in ("object", "namespace"))


def redact_operations(scope: Scope, rule: Rule) -> list[list[str]]:
    """Rewrite the scope's operations; ``[original hash, residual digest]`` for each changed
    one, in ``seq`` order. ``hash`` and ``prev_hash`` stay: the chain's links are untouched."""
    listed: list[list[str]] = []
    changed: list[Operation] = []
    for op in scope.operations.order_by("seq").iterator(BATCH):
        redacted = redact_op(rule, op.payload, op.state, op.actor_id)
        if redacted is None:
            continue
        op.payload, op.state, op.actor_id = redacted
        listed.append([op.hash, residual_digest(row_for_hash(op))])
        changed.append(op)
        if len(changed) >= BATCH:
            store.get().update(Operation, changed, ["payload", "state", "actor_id"])
            changed = []
    store.get().update(Operation, changed, ["payload", "state", "actor_id"])
    return listed


def _rewrite(rows, fields: list[str], change, prepare=None) -> int:
    """Apply ``change(row) -> bool`` to each row; save the changed ones in batches.
    ``prepare(rows)`` runs on each batch read first (one query for what ``change`` reads)."""
    model, changed, count = None, [], 0
    for batch in _batches(rows.iterator(BATCH)):
        if prepare is not None:
            prepare(batch)
        for row in batch:
            model = type(row)
            if change(row):
                changed.append(row)
                count += 1
            if len(changed) >= BATCH:
                store.get().update(model, changed, fields)
                changed = []
    if changed:
        store.get().update(model, changed, fields)
    return count


def _batches(rows) -> Iterator[list]:
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def redact_objects(scope: Scope, rule: Rule) -> int:
    def change(obj: MemoryObject) -> bool:
        before = (obj.content, obj.domain_tags, obj.evidence_ids, obj.created_by)
        obj.content, obj.domain_tags = "", []
        if rule.evidence:
            obj.evidence_ids = rule.scrub({"evidence_ids": obj.evidence_ids})["evidence_ids"]
        obj.created_by = rule.actor(obj.created_by)
        return before != (obj.content, obj.domain_tags, obj.evidence_ids, obj.created_by)

    return _rewrite(scope.objects, ["content", "domain_tags", "evidence_ids", "created_by"], change)


def redact_actor_columns(scope: Scope, rule: Rule) -> int:
    """Actor ids outside the log in the namespace: objects' creators, relationships' creators
    (a namespace erasure renames every actor; an actor erasure only that one)."""
    objects = MemoryObject.objects.filter(namespace=scope.namespace)
    if scope.actors is not None:
        objects = objects.filter(created_by__in=scope.actors)

    def change(row) -> bool:
        before = row.created_by
        row.created_by = rule.actor(row.created_by)
        return before != row.created_by

    count = _rewrite(objects.only("id", "created_by"), ["created_by"], change)
    return count + _rewrite(scope.relationships, ["created_by"], change)


def redact_tallies(scope: Scope, rule: Rule) -> int:
    """Per-session repeat tallies are keyed ``actor \x1f signal type`` (``policy.SessionTally``):
    the actor part is renamed, as in the log, so a later signal in that session still meets
    its tally."""
    if scope.actors is not None and not scope.actors:
        return 0
    tallies = SessionTally.objects.filter(object__namespace=scope.namespace)

    def change(t: SessionTally) -> bool:
        renamed = rename_tally_keys(rule, t.repeats)
        if renamed == t.repeats:
            return False
        t.repeats = renamed
        return True

    return _rewrite(tallies, ["repeats"], change)


def redact_sessions(scope: Scope, rule: Rule) -> int:
    """A changed record is stored on the row, whether it was stored or rebuilt from the log
    (``feedback.session_record``): the reader then sees the record redacted by this rule even
    when the session's FEEDBACK_SESSION operation is outside the erasure's scope."""

    def change(s: FeedbackSession) -> bool:
        record = s.record
        before = (s.context_text, s.context_tags, record)
        s.context_text, s.context_tags, redacted = redact_session(
            rule, s.context_text, s.context_tags, record
        )
        if redacted != record:
            s.record = redacted
        return before != (s.context_text, s.context_tags, redacted)

    return _rewrite(
        scope.sessions, ["context_text", "context_tags", "stored_record"], change,
        prepare=session_record.fill,
    )  # fmt: skip


def redact_signals(scope: Scope, rule: Rule) -> int:
    def change(s: SignalRecord) -> bool:
        before = (s.reason, s.actor_id)
        s.reason, s.actor_id = redact_signal(rule, s.reason, s.actor_id)
        return before != (s.reason, s.actor_id)

    return _rewrite(scope.signals, ["reason", "actor_id"], change)


def redact_traces(scope: Scope, rule: Rule) -> int:
    """OTLP spans: their facts (span attributes as mapped) of the scope's sessions' traces, or
    every trace of the namespace."""
    traces = OtlpTrace.objects.filter(namespace=scope.namespace.name)
    if scope.actors is not None:  # object, actor, session: only the sessions' own traces
        requests = list(scope.sessions.values_list("client_id", "request_id"))
        if not requests:
            return 0
        match = Q()
        for client_id, request_id in requests:
            match |= Q(client_id=client_id, request_id=request_id)
        traces = traces.filter(match)
    spans = OtlpSpan.objects.filter(trace__in=traces)

    def change(span: OtlpSpan) -> bool:
        before = span.facts
        span.facts = rule.scrub(span.facts)
        return before != span.facts

    return _rewrite(spans, ["facts"], change)


def redact_stored_answers(scope: Scope, rule: Rule, strings: set[str]) -> int:
    """Idempotency records (stored answers to retried requests) and webhook deliveries (the
    events as sent) that mention one of ``strings`` (the erased texts and ids): rewritten with
    the rule, and any remaining exact mention emptied."""
    if not strings:
        return 0

    def mentions(value) -> bool:
        if isinstance(value, str):
            return value in strings
        if isinstance(value, dict):
            return any(mentions(v) for v in value.values())
        if isinstance(value, list):
            return any(mentions(v) for v in value)
        return False

    def forget(value):
        if isinstance(value, str):
            return "" if value in strings else value
        if isinstance(value, dict):
            return {k: forget(v) for k, v in value.items()}
        if isinstance(value, list):
            return [forget(v) for v in value]
        return value

    def change_response(row: IdempotencyRecord) -> bool:
        if not mentions(row.response):
            return False
        row.response = forget(rule.scrub(row.response))
        return True

    def change_event(row: WebhookDelivery) -> bool:
        if not mentions(row.event):
            return False
        row.event = forget(rule.scrub(row.event))
        return True

    # Stored answers are signal answers (``feedback.services.signal_answer``), each naming its
    # object's namespace: only this namespace's are searched, since an actor id or a text is not
    # unique across namespaces and an erasure is confined to its namespace.
    answers = IdempotencyRecord.objects.filter(response__object__namespace=scope.namespace.name)
    count = _rewrite(answers, ["response"], change_response)
    deliveries = WebhookDelivery.objects.filter(event__namespace=scope.namespace.name)
    return count + _rewrite(deliveries, ["event"], change_event)


def erased_strings(scope: Scope, rule: Rule) -> set[str]:
    """The texts and ids this erasure removes, read before anything is rewritten: what the
    stored answers are searched for."""
    out: set[str] = set()
    for content, tags, evidence in scope.objects.values_list(
        "content", "domain_tags", "evidence_ids"
    ):
        out.update(s for s in [content, *(tags or [])] if s)
        if rule.evidence:
            out.update(e for e in evidence or [] if isinstance(e, str))
    for text, tags in scope.sessions.values_list("context_text", "context_tags"):
        out.update(s for s in [text, *(tags or [])] if s)
    out.update(r for r in scope.signals.values_list("reason", flat=True) if r)
    if scope.actors:
        out.update(scope.actors)
    return {s for s in out if isinstance(s, str) and len(s) >= 3}


def redact_checkpoints(target_ids: list[str], rule: Rule) -> int:
    """The retention checkpoints' folds of the chains whose archived operations were redacted
    (``erasure.archive``): the log's replay continues from them, as from the archive's."""

    def change(cp: ChainCheckpoint) -> bool:
        before = cp.fold
        cp.fold = redact_fold(rule, cp.fold)
        return before != cp.fold

    return _rewrite(ChainCheckpoint.objects.filter(target_id__in=target_ids), ["fold"], change)
