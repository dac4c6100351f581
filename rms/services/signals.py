"""Signals (SPEC §2–§5): the operations one signal writes on a locked object, and the session
tallies that bound its reinforcement. Callers hold the objects' row locks and write what these
return in their own transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rms import oplog, policy, store
from rms.errors import DomainError
from rms.models import MemoryObject, SessionTally, new_row


def tally_ledger(rows: Iterable[SessionTally]) -> policy.TallyLedger:
    """The ledger of tally rows already read (under the objects' locks)."""
    return policy.TallyLedger(
        {
            (row.object_id, row.session_id): (
                row.pk,
                policy.SessionTally(row.gamma_total, dict(row.repeats)),
            )
            for row in rows
        }
    )


def load_tallies(pairs: Iterable[tuple]) -> policy.TallyLedger:
    """The ledger of these (object id, session_id) pairs, read in one query; only read while
    the objects' row locks are held, so the write that follows cannot lose an update."""
    pairs = set(pairs)
    if not pairs:
        return policy.TallyLedger()
    rows = SessionTally.objects.filter(
        object_id__in={p[0] for p in pairs}, session_id__in={p[1] for p in pairs}
    )
    return tally_ledger(row for row in rows if (row.object_id, row.session_id) in pairs)


def write_tallies(db: store.Store, changes: policy.TallyChanges) -> None:
    """Insert the new tallies and update the changed ones."""

    def row(pk, object_id, session_id, tally):
        return new_row(
            SessionTally,
            id=pk,
            object_id=object_id,
            session_id=session_id,
            gamma_total=tally.gamma_total,
            repeats=tally.repeats,
        )

    db.insert(SessionTally, [row(None, *change) for change in changes.new])
    changed = [row(*change) for change in changes.changed]
    db.update(SessionTally, changed, ["gamma_total", "repeats"])


@dataclass
class SignalResult:
    signal: policy.Signal
    outcome: policy.Outcome
    feedback_op: oplog.OpRow
    change_op: oplog.OpRow | None

    @property
    def operation(self) -> oplog.OpRow:
        """The REINFORCE / PENALTY operation, or the FEEDBACK_EVENT when nothing changed."""
        return self.change_op or self.feedback_op

    @property
    def effect(self) -> str:
        return self.outcome.effect


def weights_of(outcome: policy.Outcome, signal: policy.Signal) -> tuple[float, float]:
    """(base weight, effective weight applied) of a processed signal."""
    base = policy.SIGNALS[signal.signal_type].base_weight
    if outcome.effect == policy.EFFECT_REINFORCED:
        return base, outcome.payload["gamma_effective"]
    if outcome.effect == policy.EFFECT_PENALIZED:
        return base, outcome.payload["delta"]
    return base, 0.0


def signal_ops(
    obj: MemoryObject,
    signal: policy.Signal,
    tallies: policy.TallyLedger,
    *,
    extra: dict | None = None,
    payload_json: str | None = None,
    key: oplog.ChainKey | None = None,
) -> SignalResult:
    """Apply one signal to a locked object: FEEDBACK_EVENT, then REINFORCE or PENALTY.

    The operations are returned unsaved; the object and the tally are updated in memory.
    ``payload_json``: the FEEDBACK_EVENT payload's canonical JSON when the caller knows it is
    the one of an earlier call (the automatic UNUSED of one session all carry one payload);
    ``key``: the object's ``oplog.ChainKey`` when the caller holds it.
    """
    if not policy.uses_tally(signal.signal_type):
        tally, outcome = None, policy.neutral_outcome(signal)
    else:
        tally = tallies.get(obj.pk, signal.session_id)
        outcome = policy.apply_signal(obj.to_state(), signal, tally)
    reliability, discount = policy.DETECTION_METHODS[signal.detection_method]
    base, effective = weights_of(outcome, signal)
    payload = {
        "signal_type": signal.signal_type,
        "detection_method": signal.detection_method,
        "reliability_class": reliability,
        "reliability_discount": discount,
        "base_weight": base,
        "effective_weight": effective,
        "effect": outcome.effect,
        "reason": outcome.reason,
        "session_id": signal.session_id,
        "evidence_ids": sorted(set(signal.evidence_ids)),
        **(extra or {}),
    }
    feedback_op = oplog.feedback_event(
        obj, signal=signal, payload=payload, payload_json=payload_json, key=key
    )
    change_op = None
    if outcome.op_type is not None:
        obj.apply_state(outcome.state)
        change_op = oplog.signal_applied(obj, outcome, signal, key)
        if outcome.tally is not tally:
            tallies.put(obj.pk, signal.session_id, outcome.tally)
    return SignalResult(signal, outcome, feedback_op, change_op)


def validate_client_signal(signal_type: str, detection_method: str | None) -> str:
    """Clients may not send what only the sweep produces (SPEC §2); returns the method."""
    if signal_type in policy.SYSTEM_ONLY_SIGNALS:
        raise DomainError(
            "system_only_signal",
            f"{signal_type} is produced only by the service's own sweep.",
            400,
            {"signal_type": [f"{signal_type} may not be sent by clients."]},
        )
    if detection_method in policy.SYSTEM_ONLY_METHODS:
        raise DomainError(
            "system_only_detection_method",
            f"{detection_method} is used only by the service's own sweep.",
            400,
            {"detection_method": [f"{detection_method} may not be sent by clients."]},
        )
    return policy.resolve_detection_method(signal_type, detection_method)
