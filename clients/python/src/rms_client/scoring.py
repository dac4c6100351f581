"""The server's retrieval profile score (SPEC §12), in the agent's process.

A copy of the service's pure scoring (``feedback.retrieval`` with the formulas it calls from
``feedback.utility`` and ``rms.policy``), written out here because this distribution must not
depend on the server. The service's test suite pins the two equal to 1e-12 over random inputs,
and the mirror equal to the live ``/rank``; change both together. Standard library only, and
Python 3.10 (no ``datetime.UTC``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime

WEIGHT_NAMES = ("similarity", "hotness", "utility", "confidence", "salience")
RULE_NAMES = ("confidence_floor", "conditions")
CONDITIONS = ("met", "not_refuted", "any")
REFUTED = frozenset({"FALSE", "EXPIRED"})

REASON_DEPRECATED = "deprecated"
REASON_CONDITION = "condition_not_met"
REASON_FLOOR = "below_confidence_floor"

DEPRECATED = "DEPRECATED"
CONDITIONAL = "CONDITIONAL"

#: SPEC §1 daily decay rates (FIXED) and the reinforcement boost's own rate.
DECAY_RATES = {"PERMANENT": 0.0, "SLOW": 0.005, "MEDIUM": 0.020, "FAST": 0.070, "RAPID": 0.200}
BOOST_DECAY_RATE = 0.10
#: SPEC §12: hotness halves every 7 days without a use.
HOTNESS_HALF_LIFE_DAYS = 7.0
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class Profile:
    similarity: float = 0.45
    hotness: float = 0.30
    utility: float = 0.25
    confidence: float = 0.30
    salience: float = 0.0
    confidence_floor: float = 0.0
    conditions: str = "not_refuted"


@dataclass(frozen=True)
class RankingInputs:
    epistemic_type: str
    condition_state: str | None
    confidence: float
    salience_base: float
    reinforcement_boost: float
    decay_profile: str
    pinned: bool
    last_reinforced_at: datetime | None
    created_at: datetime
    utility: float
    uses: int
    last_use_at: datetime | None


@dataclass(frozen=True)
class Ranked:
    score: float
    eligible: bool
    reason: str | None
    hotness: float
    salience_effective: float


def profile_from_out(data: Mapping) -> Profile:
    """A profile from the API's form (``{"weights": {...}, "confidence_floor", "conditions"}``)."""
    weights = dict(data.get("weights") or {})
    values = {name: float(weights[name]) for name in WEIGHT_NAMES if name in weights}
    if "confidence_floor" in data:
        values["confidence_floor"] = float(data["confidence_floor"])
    if "conditions" in data:
        values["conditions"] = str(data["conditions"])
    return Profile(**values)


def profile_out(profile: Profile) -> dict:
    data = asdict(profile)
    return {
        "weights": {name: data[name] for name in WEIGHT_NAMES},
        **{name: data[name] for name in RULE_NAMES},
    }


def hotness(uses: int, last_use_at: datetime | None, created_at: datetime, now: datetime) -> float:
    since = last_use_at if last_use_at is not None else created_at
    days = max(0.0, (now - since).total_seconds() / SECONDS_PER_DAY)
    return (1 + uses) / (2 + uses) * math.exp(-math.log(2) / HOTNESS_HALF_LIFE_DAYS * days)


def salience_effective(inputs: RankingInputs, now: datetime) -> float:
    if inputs.pinned or inputs.decay_profile == "PERMANENT":
        return min(1.0, inputs.salience_base + inputs.reinforcement_boost)
    since = inputs.last_reinforced_at or inputs.created_at
    t = max(0.0, (now - since).total_seconds() / 86400.0)
    lam = DECAY_RATES[inputs.decay_profile]
    return min(
        1.0,
        inputs.salience_base * math.exp(-lam * t)
        + inputs.reinforcement_boost * math.exp(-BOOST_DECAY_RATE * t),
    )


def eligibility(inputs: RankingInputs, profile: Profile) -> tuple[bool, str | None]:
    if inputs.epistemic_type == DEPRECATED:
        return False, REASON_DEPRECATED
    if inputs.epistemic_type == CONDITIONAL and profile.conditions != "any":
        state = inputs.condition_state
        unmet = state != "TRUE" if profile.conditions == "met" else state in REFUTED
        if unmet:
            return False, REASON_CONDITION
    if inputs.confidence < profile.confidence_floor:
        return False, REASON_FLOOR
    return True, None


def rank_one(inputs: RankingInputs, similarity: float, now: datetime, profile: Profile) -> Ranked:
    hot = hotness(inputs.uses, inputs.last_use_at, inputs.created_at, now)
    salience = salience_effective(inputs, now)
    score = (
        profile.similarity * similarity + profile.hotness * hot + profile.utility * inputs.utility
    )
    score = score + profile.confidence * inputs.confidence + profile.salience * salience
    eligible, reason = eligibility(inputs, profile)
    return Ranked(score, eligible, reason, hot, salience)


def order_key(eligible: bool, score: float, object_id: str) -> tuple:
    """Eligible first, then best score, then object id (a stable order for equal scores)."""
    return (not eligible, -score, object_id)
