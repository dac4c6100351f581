"""Utility, hotness and the ranking score (SPEC §12, from recall-echo, reconciled with §11).

Pure: plain values in, plain values out, no Django import, so the feedback-session service, the
rebuild of the aggregates, the simulations and the tests all call the same code. As in
``rms.policy``, the order of the floating-point operations follows the SPEC formulas literally;
utility is an EMA accumulated in ``seq`` order, so rebuilds are only bit-identical to the live
values if nobody "simplifies" an expression here (SPEC §6).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from rms.policy import USED_SIGNALS

# --- SPEC §12: utility ----------------------------------------------------------------------------
#: Every object starts here: neither known useful nor known useless.
UTILITY_START = 0.5
#: EMA for a used object: u' = 0.9·u + 0.1·reward.
UTILITY_EMA_KEEP = 0.9
UTILITY_EMA_GAIN = 0.1

OUTCOME_SUCCESS = "SUCCESS"
OUTCOME_PARTIAL = "PARTIAL"
OUTCOME_FAILED = "FAILED"
#: Reward of a feedback session's outcome for the objects that were used in it.
OUTCOME_REWARDS: dict[str, float] = {
    OUTCOME_SUCCESS: 1.0,
    OUTCOME_PARTIAL: 0.5,
    OUTCOME_FAILED: 0.0,
}
OUTCOMES = tuple(OUTCOME_REWARDS)

#: recall-echo's "ignored" pull, u' = 0.95·u + 0.05·0.3, applied only downward (SPEC §11: an
#: injection must never raise anything, so an object below 0.3 stays where it is).
IGNORED_KEEP = 0.95
IGNORED_GAIN = 0.05
IGNORED_TARGET = 0.3

# --- SPEC §12: hotness ----------------------------------------------------------------------------
#: Hotness halves every 7 days without a use.
HOTNESS_HALF_LIFE_DAYS = 7.0
SECONDS_PER_DAY = 86400.0


# --- SPEC §12: ranking ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RankWeights:
    """Weights of the ranking score; a namespace may override any of them (SPEC §12)."""

    similarity: float = 0.45
    hotness: float = 0.30
    utility: float = 0.25


DEFAULT_RANK_WEIGHTS = RankWeights()
RANK_WEIGHT_NAMES = ("similarity", "hotness", "utility")


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def is_used(signal_types: Iterable[str]) -> bool:
    """Whether an injected object counts as "used" given the signal types it got (SPEC §12):
    one of them is in ``rms.policy.USED_SIGNALS``."""
    return any(signal_type in USED_SIGNALS for signal_type in signal_types)


def utility_update(u: float, used: bool, outcome: str | None) -> float:
    """One feedback session's effect on an injected object's utility (SPEC §12).

    ``used`` means the object got one of ``rms.policy.USED_SIGNALS`` in the session.
    Without an outcome the session says nothing about usefulness, so utility is unchanged.
    """
    if outcome is None:
        return u
    try:
        reward = OUTCOME_REWARDS[outcome]
    except KeyError:
        raise ValueError(f"Unknown outcome {outcome!r}; expected one of {OUTCOMES}.") from None
    if used:
        new = UTILITY_EMA_KEEP * u + UTILITY_EMA_GAIN * reward
    else:
        # min(): the pull toward 0.3 may lower utility but never raise it (SPEC §11/§12).
        new = min(u, IGNORED_KEEP * u + IGNORED_GAIN * IGNORED_TARGET)
    return _clamp01(new)


def hotness(
    uses: int,
    last_use_at: datetime | None,
    created_at: datetime,
    now: datetime,
) -> float:
    """(1 + uses)/(2 + uses) · exp(−ln2/7 · days since the last use) (SPEC §12).

    Counts uses, never injections (SPEC §11). Without a use yet, days count from ``created_at``.
    A reference time in the future of ``now`` counts as 0 days, so hotness never exceeds its
    use factor.
    """
    if uses < 0:
        raise ValueError("uses cannot be negative.")
    since = last_use_at if last_use_at is not None else created_at
    days = max(0.0, (now - since).total_seconds() / SECONDS_PER_DAY)
    return (1 + uses) / (2 + uses) * math.exp(-math.log(2) / HOTNESS_HALF_LIFE_DAYS * days)


def resolve_weights(weights: RankWeights | Mapping[str, float] | None) -> RankWeights:
    """Namespace weights over the defaults; a mapping may override only some of them."""
    if weights is None:
        return DEFAULT_RANK_WEIGHTS
    if isinstance(weights, RankWeights):
        resolved = weights
    else:
        unknown = set(weights) - set(RANK_WEIGHT_NAMES)
        if unknown:
            raise ValueError(f"Unknown ranking weight(s): {sorted(unknown)}.")
        resolved = RankWeights(
            **{
                name: float(weights.get(name, getattr(DEFAULT_RANK_WEIGHTS, name)))
                for name in RANK_WEIGHT_NAMES
            }
        )
    for name in RANK_WEIGHT_NAMES:
        value = getattr(resolved, name)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"Ranking weight {name} must be a finite number ≥ 0.")
    return resolved


def rank_score(
    similarity: float,
    hotness: float,
    utility: float,
    weights: RankWeights | Mapping[str, float] | None = None,
) -> float:
    """0.45·similarity + 0.30·hotness + 0.25·utility, with per-namespace weights (SPEC §12)."""
    w = resolve_weights(weights)
    return w.similarity * similarity + w.hotness * hotness + w.utility * utility
