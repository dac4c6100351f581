"""One signal applied to one locked object, in memory (SPEC §2–§5, §8): the single place the
steps are written down, called by the signal service, the session planner and the sweep.

Operations and policy (``rms.services.signal_ops``: FEEDBACK_EVENT, then REINFORCE or PENALTY,
the object and its session tally moved), then the weights actually applied, then the object's
aggregate (SPEC §8: totals count every signal), then the signal's ``SignalRecord`` row. No
database access: callers load the object (locked), its tallies and aggregates, and write what
this returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from feedback import aggregates
from feedback.models import SignalRecord
from rms import oplog, policy
from rms import services as core
from rms.models import MemoryObject, new_row


@dataclass(frozen=True)
class Applied:
    """What applying one signal produced: the operations (``result``) and its record row, or
    None when the caller keeps no record of it."""

    result: core.SignalResult
    record: SignalRecord | None

    @property
    def ops(self) -> list[oplog.OpRow]:
        """The signal's operations in chain order: FEEDBACK_EVENT, then the change if any."""
        result = self.result
        return (
            [result.feedback_op]
            if result.change_op is None
            else [result.feedback_op, result.change_op]
        )


def apply_signal(
    obj: MemoryObject,
    signal: policy.Signal,
    *,
    tallies: policy.TallyLedger,
    ledger: aggregates.Ledger,
    extra: dict | None = None,
    payload_json: str | None = None,
    key: oplog.ChainKey | None = None,
    record: bool = True,
    session=None,
    automatic: bool = False,
) -> Applied:
    """Apply ``signal`` to ``obj`` (locked by the caller): operations, weights, aggregate and,
    with ``record``, the ``SignalRecord`` row (``session``: the feedback session it came in;
    ``automatic``: the service's own signal). ``extra``, ``payload_json`` and ``key`` are
    those of ``rms.services.signal_ops``."""
    result = core.signal_ops(obj, signal, tallies, extra=extra, payload_json=payload_json, key=key)
    _, effective = core.weights_of(result.outcome, signal)
    aggregates.on_signal(
        ledger.get(obj.pk), signal.signal_type, result.effect, effective, signal.ts
    )
    row = signal_record_row(obj, result, session=session, automatic=automatic) if record else None
    return Applied(result, row)


def signal_record_row(
    obj: MemoryObject, result: core.SignalResult, *, session=None, automatic: bool = False
) -> SignalRecord:
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
