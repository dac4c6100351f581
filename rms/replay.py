"""Replay: fold an object's operations through the policy (SPEC §6). Pure: no Django imports.

The live services and this fold call the same ``rms.policy`` functions with the same inputs, so a
replayed state is bit-identical to the stored one; ``verify_replay`` relies on that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from rms import policy

STATE_FIELDS = (
    "epistemic_type",
    "decay_profile",
    "confidence",
    "salience_base",
    "condition_state",
    "reinforcement_boost",
    "reinforcement_count",
    "last_reinforced_at",
    "pinned",
    "evidence_ids",
)


def iso(ts: datetime | None) -> str | None:
    """UTC, ISO 8601 to the microsecond: the one time format of hashes and snapshots."""
    if ts is None:
        return None
    return _iso(ts)


@lru_cache(maxsize=4096)
def _iso(ts: datetime) -> str:
    # Cached: a feedback session stamps dozens of operations with the same datetime.
    return ts.astimezone(UTC).isoformat(timespec="microseconds")


def snapshot(state: policy.ObjectState, version: int) -> dict:
    """The JSON form of a state as stored beside each operation."""
    return {
        "epistemic_type": state.epistemic_type,
        "decay_profile": state.decay_profile,
        "confidence": state.confidence,
        "salience_base": state.salience_base,
        "condition_state": state.condition_state,
        "reinforcement_boost": state.reinforcement_boost,
        "reinforcement_count": state.reinforcement_count,
        "last_reinforced_at": iso(state.last_reinforced_at),
        "pinned": state.pinned,
        "evidence_ids": list(state.evidence_ids),
        "version": version,
    }


def state_from_snapshot(data: dict) -> policy.ObjectState:
    last = data.get("last_reinforced_at")
    return policy.ObjectState(
        epistemic_type=data["epistemic_type"],
        decay_profile=data["decay_profile"],
        confidence=data["confidence"],
        salience_base=data["salience_base"],
        condition_state=data.get("condition_state"),
        reinforcement_boost=data.get("reinforcement_boost", 0.0),
        reinforcement_count=data.get("reinforcement_count", 0),
        last_reinforced_at=datetime.fromisoformat(last) if last else None,
        pinned=data.get("pinned", False),
        evidence_ids=tuple(data.get("evidence_ids", ())),
    )


@dataclass(frozen=True)
class OpRecord:
    """The parts of an operation the fold reads."""

    seq: int
    op_type: str
    ts: datetime
    actor_id: str
    actor_type: str
    session_id: str | None
    payload: dict
    state: dict | None = None
    #: The operation's id as read (a UUID from the database), for the explanation's steps.
    id: Any = None

    @classmethod
    def from_row(cls, row: Any, payload: dict | None = None) -> OpRecord:
        """The record of one operation row: an ``Operation``, or its columns read by name (a
        named ``values_list`` row, ``rms.verification.OpRow``); a row without a ``state`` column
        carries None. ``payload``: the row's payload when the caller decoded it apart."""
        return cls(
            row.seq,
            row.op_type,
            row.ts,
            row.actor_id,
            row.actor_type,
            row.session_id,
            row.payload if payload is None else payload,
            getattr(row, "state", None),
            row.id,
        )


@dataclass
class FoldStep:
    op: OpRecord
    state: policy.ObjectState
    version: int


@dataclass
class Fold:
    state: policy.ObjectState | None = None
    version: int = 0
    tallies: dict[str, policy.SessionTally] = field(default_factory=dict)
    #: What the controls did to the signal of the last operation folded (None for any other).
    breakdown: policy.Breakdown | None = None


class ReplayError(Exception):
    pass


def signal_from_op(op: OpRecord) -> policy.Signal:
    p = op.payload
    return policy.Signal(
        signal_type=p["signal_type"],
        detection_method=p["detection_method"],
        actor_id=op.actor_id,
        actor_type=op.actor_type,
        session_id=p.get("session_id") or op.session_id or "",
        ts=op.ts,
        evidence_ids=tuple(p.get("evidence_ids", ())),
    )


def step(fold: Fold, op: OpRecord) -> policy.ObjectState:
    """Advance ``fold`` by one operation and return the state after it."""
    p = op.payload
    fold.breakdown = None
    if op.op_type == "OBJECT_CREATED":
        fold.state = policy.ObjectState(
            epistemic_type=p["epistemic_type"],
            decay_profile=p["decay_profile"],
            confidence=p["confidence"],
            salience_base=p["salience_base"],
            condition_state=p.get("condition_state"),
            evidence_ids=tuple(p.get("evidence_ids", ())),
        )
    elif fold.state is None:
        raise ReplayError(f"operation #{op.seq} {op.op_type} precedes OBJECT_CREATED")
    elif op.op_type == "REINFORCE":
        signal = signal_from_op(op)
        tally = fold.tallies.get(signal.session_id, policy.SessionTally())
        outcome = policy.reinforce(fold.state, signal, tally)
        fold.state = outcome.state
        fold.tallies[signal.session_id] = outcome.tally
        fold.breakdown = outcome.breakdown
    elif op.op_type == "PENALTY":
        outcome = policy.penalize(fold.state, signal_from_op(op))
        fold.state = outcome.state
        fold.breakdown = outcome.breakdown
    elif op.op_type == "PIN":
        fold.state = policy.pin(fold.state, p.get("confidence_requested"))
    elif op.op_type == "UNPIN":
        fold.state = policy.unpin(fold.state)
    elif op.op_type == "EPISTEMIC_TRANSITION":
        fold.state = policy.transition(fold.state, p["to"])
    elif op.op_type == "CONDITION_CHANGED":
        fold.state = policy.change_condition(fold.state, p["to"])
    # INJECTION_EVENT, FEEDBACK_EVENT, IGNORED_CHECK record facts: only the version moves.
    fold.version += 1
    return fold.state


def fold_steps(ops: Iterable[OpRecord]) -> Iterator[FoldStep]:
    fold = Fold()
    for op in ops:
        state = step(fold, op)
        yield FoldStep(op, state, fold.version)


def replay(ops: Iterable[OpRecord]) -> Fold:
    fold = Fold()
    for op in ops:
        step(fold, op)
    return fold


def verify(ops: Iterable[OpRecord]) -> tuple[int, list[dict]]:
    """Fold and compare each stored state; returns (operations checked, mismatches)."""
    checked = 0
    mismatches: list[dict] = []
    for s in fold_steps(ops):
        checked += 1
        if s.op.state is not None:
            expected = snapshot(s.state, s.version)
            if expected != s.op.state:
                diff = sorted(k for k in expected if expected[k] != s.op.state.get(k))
                mismatches.append({"seq": s.op.seq, "op_type": s.op.op_type, "fields": diff})
    return checked, mismatches


def fold_to_json(fold: Fold) -> dict | None:
    """A fold as JSON (a retention checkpoint's, ``rms.models.ChainCheckpoint``): its state,
    version and session tallies; None before OBJECT_CREATED. Floats survive JSON exactly."""
    if fold.state is None:
        return None
    tallies = {
        sid: {"gamma_total": t.gamma_total, "repeats": dict(t.repeats)}
        for sid, t in fold.tallies.items()
    }
    state = snapshot(fold.state, fold.version)
    return {"state": state, "version": fold.version, "tallies": tallies}


def fold_from_json(data: dict | None) -> Fold:
    """The fold a checkpoint stored (an empty fold for None): replay continues from it."""
    if not data:
        return Fold()
    tallies = {
        sid: policy.SessionTally(gamma_total=t["gamma_total"], repeats=dict(t["repeats"]))
        for sid, t in data["tallies"].items()
    }
    return Fold(state_from_snapshot(data["state"]), data["version"], tallies)
