"""Reads of one object's page: the object, its trajectory, operations, state as of a time,
relationships and change events; ``objects_by_id`` also labels the tasks page's sweep rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count
from django.db.models.fields.json import KT

from delivery.models import WebhookDelivery
from feedback.models import (
    FeedbackAggregate,
)
from rms import changes, oplog, policy
from rms.edges import object_relationships
from rms.models import MemoryObject, Operation
from rms.replay import state_from_snapshot

# --- one object -------------------------------------------------------------------------------

#: Up to this many operations every one is a point of the trajectory; beyond it only the ones
#: that move confidence or salience are, so the chart stays light for a hot object.
TRAJECTORY_ALL_OPS = 400
TRAJECTORY_MAX_POINTS = 2000


def object_for_page(object_id) -> MemoryObject | None:
    return (
        MemoryObject.objects.select_related("namespace", "aggregate").filter(pk=object_id).first()
    )


def object_aggregate(obj: MemoryObject) -> FeedbackAggregate | None:
    try:
        return obj.aggregate
    except FeedbackAggregate.DoesNotExist:
        return None


@dataclass(frozen=True)
class SignalTotals:
    """One line of an object's feedback card: a label and its counts (SPEC §8)."""

    label: str
    counts: tuple[int, ...]
    #: The unused streak, shown beside the UNUSED total only.
    streak: int | None = None


def signal_totals(aggregate: FeedbackAggregate) -> list[SignalTotals]:
    """An aggregate's per-signal totals as the object page shows them, derived from the policy:
    the "used" types on one line (their sum makes the usage ratio), then each other total."""

    def label(field: str) -> str:
        return field.removeprefix("total_").replace("_", " ")

    used = [f for t, f in policy.TOTAL_FIELDS.items() if t in policy.USED_SIGNALS]
    lines = []
    if used:
        lines.append(
            SignalTotals(
                " · ".join(map(label, used)).capitalize(),
                tuple(getattr(aggregate, f) for f in used),
            )
        )
    for signal_type, total in policy.TOTAL_FIELDS.items():
        if signal_type not in policy.USED_SIGNALS:
            streak = aggregate.unused_streak if signal_type == policy.UNUSED else None
            lines.append(
                SignalTotals(label(total).capitalize(), (getattr(aggregate, total),), streak)
            )
    return lines


@dataclass(frozen=True)
class TrajectoryPoint:
    seq: int
    ts: datetime
    op_type: str
    signal_type: str | None
    confidence: float
    salience_effective: float
    state: policy.ObjectState


def trajectory(obj: MemoryObject, until: datetime | None = None) -> list[TrajectoryPoint]:
    """Confidence and effective salience after each operation (the newest
    TRAJECTORY_MAX_POINTS), from the states stored beside the operations.

    Operations that only record facts (INJECTION_EVENT, FEEDBACK_EVENT, IGNORED_CHECK) may be
    stored without a state; they leave it unchanged, so they carry the last state before them.
    One query, plus one when the oldest operation shown has no state of its own.
    """
    qs = Operation.objects.filter(target_id=obj.pk)
    if obj.version > TRAJECTORY_ALL_OPS:
        qs = qs.filter(op_type__in=oplog.STATE_CHANGING)
    if until is not None:
        qs = qs.filter(ts__lte=until)
    # (ts, seq) is a chain's order and the index's, so the newest points are read from the
    # index's end instead of sorting the whole chain (rms.selectors.operations_page)
    rows = list(
        qs.order_by("-ts", "-seq")
        .annotate(signal=KT("payload__signal_type"))
        .values_list("seq", "ts", "op_type", "signal", "state")[:TRAJECTORY_MAX_POINTS]
    )
    rows.reverse()
    current = None
    if rows and rows[0][4] is None:
        first_seq, first_ts = rows[0][0], rows[0][1]
        current = (
            Operation.objects.filter(target_id=obj.pk, ts__lte=first_ts, state__isnull=False)
            .exclude(ts=first_ts, seq__gte=first_seq)
            .order_by("-ts", "-seq")
            .values_list("state", flat=True)
            .first()
        )
    out = []
    parsed = None
    for seq, ts, op_type, signal, state in rows:
        if state is not None or parsed is None:
            current = state if state is not None else current
            if current is None:
                continue
            parsed = state_from_snapshot(current)
        out.append(
            TrajectoryPoint(
                seq=seq,
                ts=ts,
                op_type=op_type,
                signal_type=signal,
                confidence=parsed.confidence,
                salience_effective=policy.salience_effective(parsed, obj.created_at, ts),
                state=parsed,
            )
        )
    return out


def operations(obj: MemoryObject, *, op_type: str | None, descending: bool):
    qs = Operation.objects.filter(target_id=obj.pk)
    if op_type:
        qs = qs.filter(op_type=op_type)
    return qs.order_by(*(("-ts", "-seq") if descending else ("ts", "seq")))


def objects_by_id(ids) -> dict:
    """{id: object} with namespace, for links and labels (one query)."""
    if not ids:
        return {}
    return {
        o.pk: o
        for o in MemoryObject.objects.select_related("namespace")
        .filter(pk__in=list(ids))
        .only("id", "content", "epistemic_type", "confidence", "namespace__name")
    }


@dataclass(frozen=True)
class AsOf:
    """An object's state as of a time (SPEC §6): the operation that set it and its version."""

    op: Operation
    state: policy.ObjectState
    version: int


def object_as_of(obj: MemoryObject, at: datetime) -> AsOf | None:
    """The state after the last operation at or before ``at``; None before the object existed.
    Two indexed reads on (target, ts)."""
    op = oplog.state_as_of(obj.pk, at)
    if op is None:
        return None
    return AsOf(op, state_from_snapshot(op.state), oplog.version_as_of(obj.pk, at, op))


def relationships_of(obj: MemoryObject, now: datetime) -> list[dict]:
    """The object's relationships (``rms.edges``), each with ``outgoing`` and the ``other``
    end's object for its label (one query for all the other ends)."""
    relationships = object_relationships(obj, now)
    me = str(obj.pk)

    def other_id(r: dict) -> uuid.UUID:
        return uuid.UUID(r["target"] if r["source"] == me else r["source"])

    others = objects_by_id({other_id(r) for r in relationships})
    for r in relationships:
        r["outgoing"] = r["source"] == me
        r["other"] = others.get(other_id(r))
    return relationships


# --- the closed loop: change events, alerts, webhooks -----------------------------------------


def object_events(obj, limit: int = 20) -> list[dict]:
    """The object's latest change events (newest first), each with what webhooks made of it:
    deliveries by state (one query for all of them)."""
    events = changes.target_events(obj.pk, limit=limit, newest_first=True)
    counts: dict[str, dict[str, int]] = {}
    rows = (
        WebhookDelivery.objects.filter(event_id__in=[e["id"] for e in events])
        .values_list("event_id", "state")
        .annotate(n=Count("id"))
    )
    for event_id, state, n in rows:
        counts.setdefault(event_id, {})[state] = n
    for event in events:
        event["deliveries"] = counts.get(event["id"], {})
    return events
