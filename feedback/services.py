"""Feedback write services: signals now, feedback sessions in the ingestion issue (SPEC §7–§8).

Each service is one transaction: lock the objects (pk order), append the operations, update the
objects, their session tallies and aggregates, and store the idempotency record, or write nothing.
"""

from __future__ import annotations

import operator

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from analysis import api as detection
from feedback import aggregates
from feedback.apply import apply_signal
from feedback.models import FeedbackAggregate, SignalRecord
from rms import idempotency, policy, store
from rms import selectors as core_selectors
from rms import services as core
from rms.errors import DomainError
from rms.models import ApiClient, MemoryObject, Operation, new_row
from rms.representations import objects_out, operation_out

SIGNAL_SCOPE = "signal"


#: What an aggregate row is read as: the object id, then ``Aggregate``'s fields in order.
AGGREGATE_COLUMNS = ("object_id", *aggregates.FIELDS)
_aggregate_values = operator.attrgetter(*aggregates.FIELDS)


def aggregate_select(object_ids) -> store.Select:
    """The aggregate rows of these objects as ``AGGREGATE_COLUMNS`` tuples (for
    ``rms.store``); :func:`aggregate_ledger` reads the result."""
    return store.Select(
        FeedbackAggregate, where={"object_id": list(object_ids)}, columns=AGGREGATE_COLUMNS
    )


def aggregate_ledger(rows) -> aggregates.Ledger:
    """The ledger of aggregate rows read as ``AGGREGATE_COLUMNS``: straight into the pure
    accumulator, without a model instance in between (a batch loads thousands)."""
    return aggregates.Ledger({row[0]: aggregates.Aggregate(*row[1:]) for row in rows})


def load_aggregates(object_ids) -> aggregates.Ledger:
    """The ledger of these (locked) objects' aggregates, read in one query."""
    (rows,) = store.get().read([aggregate_select(object_ids)])
    return aggregate_ledger(rows)


def write_aggregates(db: store.Store, changes: aggregates.AggregateChanges, namespace_of) -> None:
    """Insert the new aggregates (``namespace_of``: {object id: its namespace id}) and update
    the changed ones, in two statements."""
    fields = aggregates.FIELDS
    db.insert(
        FeedbackAggregate,
        [
            new_row(
                FeedbackAggregate,
                object_id=object_id,
                namespace_id=namespace_of[object_id],
                usage_ratio=agg.usage_ratio,
                **dict(zip(fields, _aggregate_values(agg), strict=True)),
            )
            for object_id, agg in changes.new
        ],
    )
    db.update_values(
        FeedbackAggregate,
        [*fields, "usage_ratio"],
        [(pk, *_aggregate_values(agg), agg.usage_ratio) for pk, agg in changes.changed],
    )


def signal_answer(result: core.SignalResult, obj: MemoryObject) -> dict:
    """The answer to a signal posted alone (API.md), stored for its retries."""
    return {
        "operation": operation_out(result.operation),
        "effect": result.effect,
        "object": objects_out([obj], timezone.now())[0],
    }


def signal_record(
    *,
    client: ApiClient,
    object_id,
    data: dict,
    body_hash: str,
) -> tuple[int, dict]:
    """Record one signal posted alone: FEEDBACK_EVENT + REINFORCE/PENALTY + aggregate.

    One transaction. Returns (201, answer), or (200, first answer) for a retry with the same
    ``request_id`` and body (409 for another body; ``rms.idempotency``). Concurrent retries
    serialise on the object lock or, failing that, on the idempotency record's unique key; the
    loser answers from the winner's record.
    """
    detection_method = core.validate_client_signal(
        data["signal_type"], data.get("detection_method")
    )
    request_id = data.get("request_id")
    body_hash = idempotency.request_hash(body_hash, object_id)
    try:
        with transaction.atomic():
            if (
                request_id
                and (
                    first := idempotency.stored_answer(client, SIGNAL_SCOPE, request_id, body_hash)
                )
                is not None
            ):
                return 200, first
            obj = core_selectors.visible_object(client, object_id, lock=True)
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
            tallies = core.load_tallies([(obj.pk, signal.session_id)])
            aggs = load_aggregates([obj.pk])
            applied = apply_signal(
                obj, signal, tallies=tallies, ledger=aggs, extra={"request_id": request_id}
            )
            result = applied.result
            # One pipeline for every write of the signal (rms.store's batched).
            db = store.get()
            with db.batched():
                db.update(MemoryObject, [obj], list(MemoryObject.WRITABLE_FIELDS))
                db.insert(Operation, applied.ops)
                db.insert(SignalRecord, [applied.record])
                core.write_tallies(db, tallies.changes())
                write_aggregates(db, aggs.changes(), {obj.pk: obj.namespace_id})
            answer = signal_answer(result, obj)
            if request_id:
                idempotency.remember(client, SIGNAL_SCOPE, request_id, body_hash, answer)
            return 201, answer
    except IntegrityError:
        if (
            request_id
            and (first := idempotency.stored_answer(client, SIGNAL_SCOPE, request_id, body_hash))
            is not None
        ):
            return 200, first
        raise


def check_analysis(response_text: str, object_count: int, objects_field: str) -> None:
    """The bounds of one response analysis (``detection.MAX_RESPONSE_CHARS``, ``MAX_OBJECTS``):
    a longer text is 413, more objects 400 naming ``objects_field``. Checked before anything
    is analysed or written."""
    if len(response_text) > detection.MAX_RESPONSE_CHARS:
        raise DomainError(
            "response_text_too_large",
            f"response_text is longer than the {detection.MAX_RESPONSE_CHARS} characters one "
            "response analysis reads.",
            413,
        )
    if object_count > detection.MAX_OBJECTS:
        raise DomainError(
            "validation_error",
            "Too many objects for one response analysis.",
            400,
            {
                objects_field: [
                    f"At most {detection.MAX_OBJECTS} objects are analysed against one "
                    "response (in a session: the injected objects without an explicit signal)."
                ]
            },
        )


class AnalysisBudget:
    """The response analysis one request may run (``settings.RMS_ANALYSIS_BUDGET``), counted in
    characters × objects analysed, which is what an analysis' time grows with. Spent in request
    order; once an analysis does not fit, every later one of the request is refused too, so
    the refused items of a batch are its tail and can be sent again in another request."""

    def __init__(self) -> None:
        self.total = settings.RMS_ANALYSIS_BUDGET
        self.left = self.total

    def spend(self, response_text: str, object_count: int) -> None:
        """Take one analysis from the budget, or 413 ``analysis_budget_exceeded``."""
        cost = len(response_text) * object_count
        if cost > self.left:
            self.left = 0
            raise DomainError(
                "analysis_budget_exceeded",
                f"This request's response analyses exceed its budget of {self.total} characters "
                "× objects analysed; send the refused sessions in another request.",
                413,
            )
        self.left -= cost
