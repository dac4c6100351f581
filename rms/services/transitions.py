"""Operator changes of one object's state (SPEC §1): pin, unpin, epistemic transition and
condition change, each one operation on the object's chain.

Locks: each locks its one object (``rms.store``) for the change and holds no lock across network
calls. Retries: none; each either commits entirely or raises and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction

from rms import oplog, policy, store
from rms.models import ApiClient, MemoryObject, Operation
from rms.selectors import visible_object
from rms.services.common import Actor, resolve_ts


def _admin_change(
    *,
    client: ApiClient,
    object_id,
    op_type: str,
    change: Callable[[policy.ObjectState], policy.ObjectState],
    payload: Callable[[policy.ObjectState], dict],
    actor: Actor,
    ts: datetime | None,
) -> MemoryObject:
    """Lock one object, apply ``change`` and append its operation; ``payload`` reads the state
    before the change (taken under the lock, so "from" values are the ones really replaced)."""
    with transaction.atomic():
        obj = visible_object(client, object_id, lock=True)
        at = resolve_ts(ts, [obj.last_op_ts])
        before = obj.to_state()
        after = change(before)
        obj.apply_state(after)
        body = {
            **payload(before),
            "confidence_before": before.confidence,
            "confidence_after": after.confidence,
        }
        op = oplog.admin_change(
            obj, op_type, ts=at, payload=body, actor_id=actor.id, actor_type=actor.type
        )
        obj.save(update_fields=MemoryObject.WRITABLE_FIELDS)
        store.get().insert(Operation, [op])
    return obj


def object_pin(
    *,
    client: ApiClient,
    object_id,
    reason: str,
    confidence: float | None = None,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """Pin (SPEC §1): operator-affirmed, optionally with a confidence up to the pin limit."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="PIN",
        change=lambda s: policy.pin(s, confidence),
        payload=lambda s: {"reason": reason, "confidence_requested": confidence},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_unpin(
    *,
    client: ApiClient,
    object_id,
    reason: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """Unpin clamps confidence to min(0.97, type ceiling), logging before and after (SPEC §1)."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="UNPIN",
        change=policy.unpin,
        payload=lambda s: {"reason": reason},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_transition(
    *,
    client: ApiClient,
    object_id,
    to: str,
    reason: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """An EPISTEMIC_TRANSITION (admin); "deprecate" is the transition to DEPRECATED."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="EPISTEMIC_TRANSITION",
        change=lambda s: policy.transition(s, to),
        payload=lambda s: {"from": s.epistemic_type, "to": to, "reason": reason},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_condition(
    *,
    client: ApiClient,
    object_id,
    condition_state: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """CONDITION_CHANGED on a CONDITIONAL object (409 on any other type, or DEPRECATED)."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="CONDITION_CHANGED",
        change=lambda s: policy.change_condition(s, condition_state),
        payload=lambda s: {"from": s.condition_state, "to": condition_state},
        actor=actor or Actor.of(client),
        ts=ts,
    )
