"""What the API shows of the core models (API.md): namespaces, objects, operations.

Plain functions of model rows (no request, no serializer), so that a service storing a first
answer for idempotent retries (``rms.idempotency``) builds exactly what the API shows; the API's
views and ``rms.api.serializers`` use the same functions.
"""

from __future__ import annotations

from datetime import datetime

from rms import policy
from rms.extensions import object_extras
from rms.models import MemoryObject, Namespace, Operation
from rms.oplog import row_for_hash
from rms.replay import iso, state_from_snapshot


def namespace_out(ns: Namespace) -> dict:
    return {
        "name": ns.name,
        "ignore_threshold": ns.ignore_threshold,
        "relevance_threshold": ns.relevance_threshold,
        "alert_thresholds": ns.alert_thresholds,
        "weights": ns.weights,
        "retrieval": ns.retrieval,
        "retention_days": ns.retention_days,
        "created_at": iso(ns.created_at),
    }


def object_out(obj: MemoryObject, now: datetime, extra: dict | None = None) -> dict:
    state = obj.to_state()
    data = {
        "id": str(obj.pk),
        "namespace": obj.namespace.name,
        "content": obj.content,
        "domain_tags": obj.domain_tags,
        "epistemic_type": obj.epistemic_type,
        "condition_state": obj.condition_state,
        "decay_profile": obj.decay_profile,
        "confidence": obj.confidence,
        "salience_base": obj.salience_base,
        "salience_effective": policy.salience_effective(state, obj.created_at, now),
        "reinforcement_boost": obj.reinforcement_boost,
        "reinforcement_count": obj.reinforcement_count,
        "last_reinforced_at": iso(obj.last_reinforced_at),
        "evidence_ids": obj.evidence_ids,
        "pinned": obj.pinned,
        "created_by": obj.created_by,
        "created_by_type": obj.created_by_type,
        "created_at": iso(obj.created_at),
        "version": obj.version,
        "head_hash": obj.head_hash,
    }
    if extra:
        data.update(extra)
    return data


def objects_out(objects: list[MemoryObject], now: datetime) -> list[dict]:
    extras = object_extras(objects)
    return [object_out(obj, now, extras.get(obj.pk)) for obj in objects]


def operation_out(op: Operation) -> dict:
    """The operation as stored: the hashed row (SPEC §6) plus its ``seq`` and ``hash``."""
    return {"seq": op.seq, **row_for_hash(op), "hash": op.hash}


def state_as_of_out(obj: MemoryObject, op: Operation, as_of: datetime, version: int) -> dict:
    """The object as it stood at ``as_of``: the state stored by the last state-changing
    operation with ts ≤ as_of (SPEC §6); ``version`` counts every operation up to then."""
    state = state_from_snapshot(op.state)
    return {
        "id": str(obj.pk),
        "namespace": obj.namespace.name,
        "as_of": iso(as_of),
        "content": obj.content,
        "epistemic_type": state.epistemic_type,
        "condition_state": state.condition_state,
        "decay_profile": state.decay_profile,
        "confidence": state.confidence,
        "salience_base": state.salience_base,
        "salience_effective": policy.salience_effective(state, obj.created_at, as_of),
        "reinforcement_boost": state.reinforcement_boost,
        "reinforcement_count": state.reinforcement_count,
        "last_reinforced_at": iso(state.last_reinforced_at),
        "evidence_ids": list(state.evidence_ids),
        "pinned": state.pinned,
        "version": version,
        "operation": {"seq": op.seq, "id": str(op.id), "op_type": op.op_type, "ts": iso(op.ts)},
    }
