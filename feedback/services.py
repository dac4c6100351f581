"""Feedback write services: signals now, feedback sessions in the ingestion issue (SPEC §7–§8).

Each service is one transaction: lock the objects (pk order), append the operations, update the
objects, their session tallies and aggregates, and store the idempotency record, or write nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import IntegrityError, connection, transaction

from feedback import aggregates
from feedback.models import FeedbackAggregate, SignalRecord
from feedback.selectors import aggregate_from_row
from rms import bulk, fetch, policy
from rms import services as core
from rms.errors import DomainError
from rms.models import ApiClient, IdempotencyRecord, MemoryObject, Operation, new_row

SIGNAL_SCOPE = "signal"


def signal_record_row(obj, result: core.SignalResult, *, session=None, automatic=False):
    """The per-signal FEEDBACK_EVENT record (SPEC §2): detection, weights and effect."""
    payload, signal = result.feedback_op.payload, result.signal
    return new_row(
        SignalRecord,
        id=None,
        feedback_session_id=None if session is None else session.pk,
        object_id=obj.pk,
        namespace_id=obj.namespace_id,
        operation_id=result.feedback_op.id,
        ts=signal.ts,
        session_id=signal.session_id,
        signal_type=signal.signal_type,
        detection_method=signal.detection_method,
        reliability_class=payload["reliability_class"],
        base_weight=payload["base_weight"],
        effective_weight=payload["effective_weight"],
        effect=result.effect,
        reason=(result.outcome.reason or "")[:200],
        actor_id=signal.actor_id,
        actor_type=signal.actor_type,
        automatic=automatic,
    )


def aggregate_select(object_ids: list) -> fetch.Select:
    """PostgreSQL: the aggregate rows of these objects (plain SQL, see rms.fetch)."""
    return fetch.Select(FeedbackAggregate, "a", "a.object_id = ANY(%b::uuid[])", [list(object_ids)])


def _aggregate_rows(object_ids: list) -> dict:
    """{object id: FeedbackAggregate row} of these objects."""
    if connection.vendor == "postgresql":
        found = aggregate_select(object_ids).run()
    else:
        found = FeedbackAggregate.objects.filter(object_id__in=object_ids)
    return {row.object_id: row for row in found}


class AggregateStore:
    """Aggregates of locked objects, loaded in one query and written back in two."""

    def __init__(self, objects: list, rows: dict | None = None) -> None:
        """``rows``: the objects' aggregate rows by object id, when the caller already read them
        (after taking the locks); otherwise one query reads them."""
        self._objects = {obj.pk: obj for obj in objects}
        if rows is None:
            rows = _aggregate_rows([obj.pk for obj in objects])
        self._rows = rows
        self._values: dict = {}

    def get(self, object_id) -> aggregates.Aggregate:
        agg = self._values.get(object_id)
        if agg is None:
            agg = aggregate_from_row(self._rows.get(object_id))
            self._values[object_id] = agg
        return agg

    def flush(self) -> None:
        new, old = [], []
        for object_id, agg in self._values.items():
            row = self._rows.get(object_id)
            if row is None:
                obj = self._objects[object_id]
                row = FeedbackAggregate(object_id=object_id, namespace_id=obj.namespace_id)
                new.append(row)
            else:
                old.append(row)
            for field in aggregates.FIELDS:
                setattr(row, field, getattr(agg, field))
            row.usage_ratio = agg.usage_ratio
        bulk.insert(FeedbackAggregate, new)
        bulk.update(FeedbackAggregate, old, [*aggregates.FIELDS, "usage_ratio"])


def stored_response(client: ApiClient, scope: str, request_id: str, body_hash: str) -> dict | None:
    """The first answer to this key, or 409 when the body differs (SPEC §7)."""
    record = IdempotencyRecord.objects.filter(
        client=client, scope=scope, request_id=request_id
    ).first()
    if record is None:
        return None
    if record.body_hash != body_hash:
        raise DomainError(
            "idempotency_mismatch",
            f"request_id {request_id!r} was already used with a different body.",
            409,
        )
    return record.response


def signal_record(
    *,
    client: ApiClient,
    object_id,
    data: dict,
    body_hash: str,
    render: Callable[[core.SignalResult, object], dict],
) -> tuple[int, dict]:
    """Record one signal posted alone: FEEDBACK_EVENT + REINFORCE/PENALTY + aggregate.

    Returns (201, answer), or (200, first answer) for a retry with the same ``request_id`` and
    body. Concurrent retries serialise on the object lock or, failing that, on the idempotency
    record's unique key; the loser answers from the winner's record.
    """
    detection_method = core.validate_client_signal(
        data["signal_type"], data.get("detection_method")
    )
    request_id = data.get("request_id")
    try:
        with transaction.atomic():
            if (
                request_id
                and (first := stored_response(client, SIGNAL_SCOPE, request_id, body_hash))
                is not None
            ):
                return 200, first
            obj = core.visible_object(client, object_id, lock=True)
            ts = core.resolve_ts(data.get("ts"), [obj.last_op_ts])
            actor = core.Actor.of(client, data.get("actor_id"), data.get("actor_type"))
            signal = policy.Signal(
                signal_type=data["signal_type"],
                detection_method=detection_method,
                actor_id=actor.id,
                actor_type=actor.type,
                session_id=data["session_id"],
                ts=ts,
                evidence_ids=tuple(data.get("evidence_ids") or ()),
            )
            tallies = core.TallyStore([(obj.pk, signal.session_id)])
            result = core.signal_ops(obj, signal, tallies, extra={"request_id": request_id})
            store = AggregateStore([obj])
            _, effective = core.weights_of(result.outcome, signal)
            aggregates.on_signal(
                store.get(obj.pk), signal.signal_type, result.effect, effective, ts
            )
            # One pipeline for every write of the signal (rms.bulk.batched).
            with bulk.batched():
                bulk.update(MemoryObject, [obj], list(MemoryObject.WRITABLE_FIELDS))
                bulk.insert(Operation, [op for op in (result.feedback_op, result.change_op) if op])
                bulk.insert(SignalRecord, [signal_record_row(obj, result)])
                tallies.flush()
                store.flush()
            answer = render(result, obj)
            if request_id:
                IdempotencyRecord.objects.create(
                    client=client,
                    scope=SIGNAL_SCOPE,
                    request_id=request_id,
                    body_hash=body_hash,
                    response=answer,
                )
            return 201, answer
    except IntegrityError:
        if (
            request_id
            and (first := stored_response(client, SIGNAL_SCOPE, request_id, body_hash)) is not None
        ):
            return 200, first
        raise
