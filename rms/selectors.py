"""Reads of the core domain that need more than one model query (STYLE: reads are selectors)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from rms import explain, policy, replay
from rms.models import MemoryObject, Operation

_OP_FIELDS = ("id", "seq", "op_type", "ts", "actor_id", "actor_type", "session_id", "payload")


def object_explanation(obj: MemoryObject, as_of: datetime) -> dict | None:
    """Why ``obj``'s confidence and salience were what they were at ``as_of``
    (``rms.explain``), or None when it did not exist yet.

    One indexed read of its chain up to ``as_of``, only the operations the fold reads: those
    that move the state and the FEEDBACK_EVENTs of refused signals (injections, sweep checks
    and the FEEDBACK_EVENT beside each applied signal, most of a long chain, stay in the
    table)."""
    # A chain's (ts, seq) order is its seq order (ts never goes back on a chain).
    rows = (
        Operation.objects.filter(target_id=obj.pk, ts__lte=as_of)
        .filter(
            Q(op_type__in=explain.STATE_OP_TYPES)
            | Q(op_type="FEEDBACK_EVENT", payload__effect=policy.EFFECT_REJECTED)
        )
        .order_by("ts", "seq")
        .values_list(*_OP_FIELDS)
    )
    ops = (
        replay.OpRecord(
            seq=seq,
            op_type=op_type,
            ts=ts,
            actor_id=actor_id,
            actor_type=actor_type,
            session_id=session_id,
            payload=payload,
            id=str(op_id),
        )
        for op_id, seq, op_type, ts, actor_id, actor_type, session_id, payload in rows
    )
    try:
        answer = explain.explain(ops, created_at=obj.created_at, as_of=as_of)
    except explain.NotYetCreated:
        return None
    return {"id": str(obj.pk), "namespace": obj.namespace.name, **answer}
