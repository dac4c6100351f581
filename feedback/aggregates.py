"""Per-object feedback aggregates (SPEC §8), as a pure accumulator. No Django imports.

The live services and the rebuild from the operation log call these same functions in ``seq``
order, so sums are accumulated in the same order and the rebuild equals the live values exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from feedback.utility import UTILITY_START, is_used, utility_update
from rms import policy
from rms.policy import signals_of_kind

#: ``last_positive_signal`` / ``last_negative_signal`` move with these (SPEC §8).
POSITIVE = signals_of_kind(policy.POSITIVE)
NEGATIVE = signals_of_kind(policy.NEGATIVE)
#: The signals with a total of their own (SPEC §8), and the fields of "used" ones (usage_ratio).
TOTAL_FIELD = policy.TOTAL_FIELDS
USED_TOTAL_FIELDS = tuple(f for t, f in TOTAL_FIELD.items() if t in policy.USED_SIGNALS)


def _with_signal_totals(after: str):
    """Add one ``int`` count, starting at 0, per signal total of the policy (SPEC §8), right
    after the field ``after``: a signal type with a total needs no edit here."""

    def add(cls):
        annotations = {}
        for name, kind in cls.__annotations__.items():
            annotations[name] = kind
            if name == after:
                for total in TOTAL_FIELD.values():
                    annotations[total] = "int"
                    setattr(cls, total, 0)
        cls.__annotations__ = annotations
        return cls

    return add


@dataclass(slots=True)
@_with_signal_totals(after="total_token_cost")
class Aggregate:
    """Mutable on purpose: a rebuild folds a million operations through one of these per object."""

    total_injections: int = 0
    #: Σ token_cost of the injections: the all-time budget spent on the object, so the all-time
    #: budget_waste_ratio (SPEC §10) is a sum over aggregates instead of a scan of injections.
    total_token_cost: int = 0
    last_positive_signal: datetime | None = None
    last_negative_signal: datetime | None = None
    lifetime_gamma_applied: float = 0.0
    lifetime_delta_applied: float = 0.0
    unused_streak: int = 0
    utility: float = UTILITY_START
    uses: int = 0
    last_use_at: datetime | None = None
    # Sessions ever closed with only UNUSED for the object, and that count at its last
    # IGNORED_CHECK: the sweep examines an object again only when the first has grown (SPEC §9).
    unused_sessions: int = 0
    checked_unused_sessions: int = 0

    @property
    def usage_ratio(self) -> float | None:
        """min(1, (Σ totals of the "used" signal types) / injections); None without any."""
        if self.total_injections == 0:
            return None
        used = sum(getattr(self, f) for f in USED_TOTAL_FIELDS)
        return min(1.0, used / self.total_injections)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["usage_ratio"] = self.usage_ratio
        return data


FIELDS = tuple(Aggregate.__dataclass_fields__)


def on_injection(agg: Aggregate, token_cost: int) -> None:
    agg.total_injections += 1
    agg.total_token_cost += token_cost


def on_signal(
    agg: Aggregate, signal_type: str, effect: str, effective_weight: float, ts: datetime
) -> None:
    """Count one signal, in a session or alone (SPEC §8: totals count every signal)."""
    field = TOTAL_FIELD.get(signal_type)
    if field is not None:
        setattr(agg, field, getattr(agg, field) + 1)
    if signal_type in POSITIVE:
        agg.last_positive_signal = ts
    elif signal_type in NEGATIVE:
        agg.last_negative_signal = ts
    if effect == "reinforced":
        agg.lifetime_gamma_applied += effective_weight
    elif effect == "penalized":
        agg.lifetime_delta_applied += effective_weight
    if signal_type != policy.UNUSED:
        # Any signal other than UNUSED, in a session or alone, ends an unused streak.
        agg.unused_streak = 0


def on_session_end(
    agg: Aggregate,
    *,
    signal_types: list[str],
    outcome: str | None,
    ts: datetime,
    ranking: tuple[float, int, datetime | None] | None = None,
) -> None:
    """Close one feedback session for an object injected in it (SPEC §8, §12).

    ``signal_types`` are the signals it received in this session, automatic UNUSED included.
    The streak grows only when every one of them was UNUSED; otherwise a signal already reset it.
    Utility moves only with an outcome, and only down for an object that was not used (§11).
    ``ranking``: :func:`ranking_after_session` of these same arguments, when the caller already
    computed it (the planner, for the session's INJECTION_EVENT): stored as it is.
    """
    if all(t == policy.UNUSED for t in signal_types):
        agg.unused_streak += 1
        agg.unused_sessions += 1
    if ranking is None:
        ranking = ranking_after_session(agg, signal_types=signal_types, outcome=outcome, ts=ts)
    agg.utility, agg.uses, agg.last_use_at = ranking


def ranking_after_session(
    agg: Aggregate, *, signal_types: list[str], outcome: str | None, ts: datetime
) -> tuple[float, int, datetime | None]:
    """(utility, uses, last_use_at) after the session closes for the object (SPEC §8, §12):
    what :func:`on_session_end` stores, and what the session's INJECTION_EVENT carries for the
    ranking event (computed before the session's signals are applied: they decide it alone)."""
    used = is_used(signal_types)
    if used:
        return utility_update(agg.utility, used, outcome), agg.uses + 1, ts
    return utility_update(agg.utility, used, outcome), agg.uses, agg.last_use_at


def is_sweep_candidate(agg: Aggregate, threshold: int) -> bool:
    """Should the IGNORED_REPEATEDLY sweep examine this object? (SPEC §9: streak ≥ N, and a new
    session since the last IGNORED_CHECK, so a second run without new sessions writes nothing.)"""
    return agg.unused_streak >= threshold and agg.unused_sessions > agg.checked_unused_sessions


def on_ignored_check(agg: Aggregate, unused_sessions: int) -> None:
    """An IGNORED_CHECK examined the object when it had ``unused_sessions`` (SPEC §9)."""
    agg.checked_unused_sessions = unused_sessions


@dataclass
class AggregateChanges:
    """The aggregates a write changed: ``new`` without a stored row, ``changed`` with one, each
    as (object id, aggregate), in the order they were first handed out."""

    new: list[tuple]
    changed: list[tuple]


class Ledger:
    """The aggregates of the objects a write holds locked: the stored ones ({object id:
    Aggregate}), and those handed out by :meth:`get` to be moved, which :meth:`changes` lists.
    An object without a stored aggregate starts from an empty one."""

    def __init__(self, stored: dict | None = None) -> None:
        self._stored = stored or {}
        self._values: dict = {}

    def get(self, object_id) -> Aggregate:
        agg = self._values.get(object_id)
        if agg is None:
            agg = self._values[object_id] = self._stored.get(object_id) or Aggregate()
        return agg

    def changes(self) -> AggregateChanges:
        out = AggregateChanges([], [])
        for object_id, agg in self._values.items():
            (out.changed if object_id in self._stored else out.new).append((object_id, agg))
        return out
