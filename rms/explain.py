"""Why an object's confidence and salience are what they are (``/objects/{id}/explain``).

Pure: no Django imports. The explanation is the replay fold itself (``rms.replay.step``, which
calls the ``rms.policy`` functions the live services call), with the state before and after each
operation and the policy's own :class:`rms.policy.Breakdown` of what each control did. Nothing
here re-derives a rule, so the steps chain exactly and ``final`` is the stored state.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rms import policy, replay

CONFIDENCE = "confidence"
SALIENCE_BASE = "salience_base"
SALIENCE_EFFECTIVE = "salience_effective"
SERIES = (CONFIDENCE, SALIENCE_BASE, SALIENCE_EFFECTIVE)

KIND_SIGNAL = "signal"
KIND_REJECTED = "rejected"
KIND_ADMIN = "admin"
KIND_DECAY = "decay"
KINDS = (KIND_SIGNAL, KIND_REJECTED, KIND_ADMIN, KIND_DECAY)

#: The operations the explanation folds: those that move the state. It also reads the
#: FEEDBACK_EVENTs of refused signals (a refused signal leaves only that, with the reason);
#: any other operation given is skipped.
STATE_OP_TYPES = frozenset(
    {
        "OBJECT_CREATED",
        "REINFORCE",
        "PENALTY",
        "PIN",
        "UNPIN",
        "EPISTEMIC_TRANSITION",
        "CONDITION_CHANGED",
    }
)
_SIGNAL_OPS = frozenset({"REINFORCE", "PENALTY"})

#: Breakdown fields, by the control's name in the answer. Weight cuts first, in policy order.
_WEIGHT_CONTROLS = (
    ("reliability_discount", "reliability_cut"),
    ("correlation_discount", "correlation_cut"),
    ("repeat_diminishing", "repeat_cut"),
    ("session_cap", "session_cap_cut"),
)
_VALUE_CONTROLS = (("ceiling", "ceiling_cut"), ("floor", "floor_cut"))


class NotYetCreated(Exception):
    """The operations given do not include the object's creation (``as_of`` before it)."""


def _controls(breakdown: policy.Breakdown) -> tuple[list[dict], list[dict]]:
    """The controls that cut this signal, for the salience series and for the confidence:
    weight cuts move every series, value cuts (ceiling, floor) only the confidence, the one
    value they bound."""
    weight = [
        {"control": name, "cut": cut, "unit": "weight"}
        for name, attr in _WEIGHT_CONTROLS
        if (cut := getattr(breakdown, attr)) > 0.0
    ]
    value = [
        {"control": name, "cut": cut, "unit": "confidence"}
        for name, attr in _VALUE_CONTROLS
        if (cut := getattr(breakdown, attr)) > 0.0
    ]
    return weight, weight + value if value else weight


def _op_fields(op: replay.OpRecord, kind: str) -> dict:
    p = op.payload
    fields = {
        "kind": kind,
        "operation_id": None if op.id is None else str(op.id),
        "op_type": op.op_type,
        "ts": replay.iso(op.ts),
        "actor_id": op.actor_id,
        "actor_type": op.actor_type,
    }
    if kind in (KIND_SIGNAL, KIND_REJECTED):
        fields.update(
            signal_type=p.get("signal_type"),
            detection_method=p.get("detection_method"),
            session_id=p.get("session_id") or op.session_id,
        )
    if kind == KIND_REJECTED:
        fields["reason"] = p.get("reason")
    if kind == KIND_ADMIN:
        fields["reason"] = p.get("reason")
        if "to" in p:
            fields["change"] = {"from": p.get("from"), "to": p["to"]}
        if op.op_type == "PIN":
            fields["confidence_requested"] = p.get("confidence_requested")
    return fields


def _weight(op: replay.OpRecord, breakdown: policy.Breakdown) -> dict:
    return {
        "name": "gamma" if op.op_type == "REINFORCE" else "delta",
        "asked": breakdown.weight_asked,
        "applied": breakdown.weight_applied,
    }


class _Series:
    def __init__(self, start: float) -> None:
        self.start = start
        self.value = start
        self.steps: list[dict] = []
        self.totals = dict.fromkeys(KINDS, 0.0)

    def add(self, before: float, after: float, step: dict) -> None:
        """Append ``step`` (a dict of its own: it is completed in place)."""
        step["before"] = before
        step["after"] = after
        self.steps.append(step)
        self.totals[step["kind"]] += after - before
        self.value = after

    def out(self) -> dict:
        return {
            "start": self.start,
            "steps": self.steps,
            "final": self.value,
            "totals": {**self.totals, "change": self.value - self.start},
        }


def explain(ops: Iterable[replay.OpRecord], *, created_at: datetime, as_of: datetime) -> dict:
    """Fold ``ops`` (one object's chain up to ``as_of``, in chain order) and answer each series
    as ``{"start", "steps", "final", "totals"}``.

    Effective salience also decays between operations: a ``decay`` step covers each stretch of
    time in which it fell (read-time decay, SPEC §1), the last one up to ``as_of``.
    """
    fold = replay.Fold()
    series: dict[str, _Series] = {}
    clock = created_at
    for op in ops:
        if op.op_type == "FEEDBACK_EVENT":
            if fold.state is None or op.payload.get("effect") != policy.EFFECT_REJECTED:
                continue
            fields = _op_fields(op, KIND_REJECTED)
            eff = _decay(series, fold.state, created_at, clock, op.ts)
            clock = op.ts
            state = fold.state
            series[CONFIDENCE].add(state.confidence, state.confidence, fields)
            series[SALIENCE_BASE].add(state.salience_base, state.salience_base, dict(fields))
            series[SALIENCE_EFFECTIVE].add(eff, eff, dict(fields))
            continue
        if op.op_type not in STATE_OP_TYPES:
            continue
        before = fold.state
        after = replay.step(fold, op)
        if before is None:
            series = {
                CONFIDENCE: _Series(after.confidence),
                SALIENCE_BASE: _Series(after.salience_base),
                SALIENCE_EFFECTIVE: _Series(
                    policy.salience_effective(after, created_at, created_at)
                ),
            }
            continue
        kind = KIND_SIGNAL if op.op_type in _SIGNAL_OPS else KIND_ADMIN
        fields = _op_fields(op, kind)
        eff_before = _decay(series, before, created_at, clock, op.ts)
        clock = op.ts
        breakdown = fold.breakdown
        if breakdown is None:
            salience_fields = confidence_fields = fields
        else:
            weight = _weight(op, breakdown)
            salience_controls, confidence_controls = _controls(breakdown)
            salience_fields = {**fields, "weight": weight, "controls": salience_controls}
            confidence_fields = {**fields, "weight": weight, "controls": confidence_controls}
        series[CONFIDENCE].add(before.confidence, after.confidence, dict(confidence_fields))
        series[SALIENCE_BASE].add(before.salience_base, after.salience_base, dict(salience_fields))
        series[SALIENCE_EFFECTIVE].add(
            eff_before,
            policy.salience_effective(after, created_at, op.ts),
            salience_fields,  # the other two series took copies
        )
    if fold.state is None:
        raise NotYetCreated
    _decay(series, fold.state, created_at, clock, as_of)
    state = fold.state
    return {
        "as_of": replay.iso(as_of),
        "epistemic_type": state.epistemic_type,
        "decay_profile": state.decay_profile,
        "pinned": state.pinned,
        "last_reinforced_at": replay.iso(state.last_reinforced_at),
        **{name: series[name].out() for name in SERIES},
    }


def _decay(
    series: dict[str, _Series],
    state: policy.ObjectState,
    created_at: datetime,
    frm: datetime,
    to: datetime,
) -> float:
    """A ``decay`` step on effective salience from ``frm`` to ``to``, when it moved; returns
    the value at ``to``."""
    eff = series[SALIENCE_EFFECTIVE]
    after = policy.salience_effective(state, created_at, to)
    if after == eff.value:
        return after
    since = state.last_reinforced_at or created_at
    eff.add(
        eff.value,
        after,
        {
            "kind": KIND_DECAY,
            "operation_id": None,
            "op_type": None,
            "from_ts": replay.iso(frm),
            "ts": replay.iso(to),
            "days_since_reinforcement": max(0.0, (to - since).total_seconds() / 86400.0),
            "decay_profile": state.decay_profile,
        },
    )
    return after
