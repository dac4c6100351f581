"""The operation log writers (SPEC §6): hashing, and one small builder per operation type.

Builders return unsaved ``Operation`` rows and advance the target's chain head in memory; the
calling service saves the target and inserts the rows in the same transaction (STYLE §3).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any, Protocol

from rms import policy
from rms.models import MemoryObject, Operation
from rms.replay import iso, snapshot

TARGET_OBJECT = "memory_object"
TARGET_SESSION = "feedback_session"
TARGET_RELATIONSHIP = "relationship"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def hash_row(prev_hash: str, row: dict) -> str:
    return hashlib.sha256((prev_hash + canonical_json(row)).encode()).hexdigest()


def row_for_hash(op: Operation) -> dict:
    """The row without ``hash`` and ``seq``, in canonical types (SPEC §6)."""
    return {
        "id": str(op.id),
        "ts": iso(op.ts),
        "op_type": op.op_type,
        "target_type": op.target_type,
        "target_id": str(op.target_id),
        "namespace": op.namespace,
        "actor_id": op.actor_id,
        "actor_type": op.actor_type,
        "session_id": op.session_id,
        "payload": op.payload,
        "policy_version": op.policy_version,
        "state": op.state,
        "prev_hash": op.prev_hash,
    }


def operation_hash(op: Operation) -> str:
    return hash_row(op.prev_hash, row_for_hash(op))


class ChainTarget(Protocol):
    pk: Any
    head_hash: str
    last_op_ts: datetime


def append(
    target: ChainTarget,
    *,
    target_type: str,
    namespace: str,
    op_type: str,
    ts: datetime,
    payload: dict,
    actor_id: str,
    actor_type: str,
    session_id: str | None = None,
    state: dict | None = None,
    policy_version: str = "",
) -> Operation:
    """Build the next operation on ``target``'s chain and move the chain head."""
    op = Operation(
        id=uuid.uuid4(),
        ts=ts,
        op_type=op_type,
        target_type=target_type,
        target_id=target.pk,
        namespace=namespace,
        actor_id=actor_id,
        actor_type=actor_type,
        session_id=session_id,
        payload=payload,
        policy_version=policy_version,
        state=state,
        prev_hash=target.head_hash,
    )
    op.hash = operation_hash(op)
    target.head_hash = op.hash
    target.last_op_ts = ts
    return op


def _object_op(
    obj: MemoryObject,
    op_type: str,
    *,
    ts: datetime,
    payload: dict,
    actor_id: str,
    actor_type: str,
    session_id: str | None = None,
    policy_version: str = "",
) -> Operation:
    """Every operation on an object's chain bumps its version and stores the state after it."""
    obj.version += 1
    return append(
        obj,
        target_type=TARGET_OBJECT,
        namespace=obj.namespace.name,
        op_type=op_type,
        ts=ts,
        payload=payload,
        actor_id=actor_id,
        actor_type=actor_type,
        session_id=session_id,
        state=snapshot(obj.to_state(), obj.version),
        policy_version=policy_version,
    )


def object_created(obj: MemoryObject, *, ts: datetime, actor_id: str, actor_type: str) -> Operation:
    payload = {
        "content": obj.content,
        "domain_tags": obj.domain_tags,
        "epistemic_type": obj.epistemic_type,
        "condition_state": obj.condition_state,
        "decay_profile": obj.decay_profile,
        "confidence": obj.confidence,
        "salience_base": obj.salience_base,
        "evidence_ids": obj.evidence_ids,
    }
    return _object_op(
        obj,
        "OBJECT_CREATED",
        ts=ts,
        payload=payload,
        actor_id=actor_id,
        actor_type=actor_type,
        policy_version=policy.POLICY_VERSION,
    )


def signal_applied(obj: MemoryObject, outcome: policy.Outcome, signal: policy.Signal) -> Operation:
    """REINFORCE or PENALTY with the RFC payload (SPEC §6)."""
    return _object_op(
        obj,
        outcome.op_type,
        ts=signal.ts,
        payload=outcome.payload,
        actor_id=signal.actor_id,
        actor_type=signal.actor_type,
        session_id=signal.session_id,
        policy_version=policy.POLICY_VERSION,
    )


def feedback_event(obj: MemoryObject, *, signal: policy.Signal, payload: dict) -> Operation:
    return _object_op(
        obj,
        "FEEDBACK_EVENT",
        ts=signal.ts,
        payload=payload,
        actor_id=signal.actor_id,
        actor_type=signal.actor_type,
        session_id=signal.session_id,
        policy_version=policy.POLICY_VERSION,
    )


def injection_event(
    obj: MemoryObject, *, ts: datetime, payload: dict, actor_id: str, actor_type: str
) -> Operation:
    return _object_op(
        obj,
        "INJECTION_EVENT",
        ts=ts,
        payload=payload,
        actor_id=actor_id,
        actor_type=actor_type,
        session_id=payload.get("session_id"),
    )


def ignored_check(
    obj: MemoryObject, *, ts: datetime, payload: dict, actor_id: str, actor_type: str
) -> Operation:
    return _object_op(
        obj,
        "IGNORED_CHECK",
        ts=ts,
        payload=payload,
        actor_id=actor_id,
        actor_type=actor_type,
        policy_version=policy.POLICY_VERSION,
    )


def admin_change(
    obj: MemoryObject,
    op_type: str,
    *,
    ts: datetime,
    payload: dict,
    actor_id: str,
    actor_type: str,
) -> Operation:
    """PIN, UNPIN, EPISTEMIC_TRANSITION and CONDITION_CHANGED."""
    return _object_op(
        obj,
        op_type,
        ts=ts,
        payload=payload,
        actor_id=actor_id,
        actor_type=actor_type,
        policy_version=policy.POLICY_VERSION,
    )
