"""The retrieval profile (SPEC §12): the score a retriever should use and who may be offered.

Pure: plain values in, plain values out, no Django import. ``/rank``, the ranking snapshot and
the simulations call :func:`rank_one`; the client's local mirror carries a copy of this module
(``rms_client.scoring``, a separate distribution cannot import the server), pinned to it by a
property test to 1e-12 and by a test of the mirror against the live ``/rank``.

The score is a weighted sum of terms each in [0, 1]: similarity, hotness and utility (the
recall-echo profile, ``feedback.utility.rank_score``, so a namespace whose weights hold exactly
those three keys gets exactly that score), plus confidence and effective salience (SPEC §1,
decayed at the request's clock). Eligibility is separate from the score: an ineligible object is
answered with its score and a reason, and is ranked after every eligible one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime

from feedback.utility import (
    DEFAULT_RANK_WEIGHTS,
    RankWeights,
    hotness,
    rank_score,
)
from rms.policy import CONDITIONAL, DEPRECATED, ObjectState, salience_effective
from rms.retrieval_rules import CONDITIONS, RULE_NAMES, WEIGHT_NAMES

#: SPEC §12's own three weights (the recall-echo profile).
SPEC_WEIGHTS = ("similarity", "hotness", "utility")
#: Condition states that refute a CONDITIONAL object's condition.
REFUTED = frozenset({"FALSE", "EXPIRED"})

#: Reasons an object is not eligible, in the order they are checked.
REASON_DEPRECATED = "deprecated"
REASON_CONDITION = "condition_not_met"
REASON_FLOOR = "below_confidence_floor"


@dataclass(frozen=True)
class Profile:
    """A namespace's retrieval profile. The defaults are the default profile of new namespaces:
    SPEC §12's weights plus confidence at 0.30, chosen by measurement (docs/DECISIONS.md,
    "Retrieval"); refuted conditions ineligible; no confidence floor."""

    similarity: float = DEFAULT_RANK_WEIGHTS.similarity
    hotness: float = DEFAULT_RANK_WEIGHTS.hotness
    utility: float = DEFAULT_RANK_WEIGHTS.utility
    confidence: float = 0.30
    salience: float = 0.0
    confidence_floor: float = 0.0
    conditions: str = "not_refuted"


DEFAULT_PROFILE = Profile()


@dataclass(frozen=True)
class RankingInputs:
    """Everything about one object that its score and eligibility need (the snapshot's row)."""

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


def _unit(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number.")
    value = float(value)
    if not math.isfinite(value) or value < 0 or value > 1:
        raise ValueError(f"{name} must be a number in [0, 1].")
    return value


def profile_from(weights: Mapping | None, rules: Mapping | None = None) -> Profile:
    """A namespace's profile: its ``weights`` and eligibility ``rules`` over the defaults.
    Anything unknown or out of range is a ValueError naming it."""
    weights, rules = dict(weights or {}), dict(rules or {})
    unknown = sorted(set(weights) - set(WEIGHT_NAMES)) + sorted(set(rules) - set(RULE_NAMES))
    if unknown:
        raise ValueError(f"Unknown retrieval profile key(s): {', '.join(unknown)}.")
    values = {name: _unit(f"weights.{name}", weights[name]) for name in weights}
    if set(SPEC_WEIGHTS) <= set(weights):
        # Exactly the recall-echo profile unless the namespace adds the other terms itself
        # (SPEC §12: a namespace whose weights hold exactly those three gets exactly that score).
        values.setdefault("confidence", 0.0)
        values.setdefault("salience", 0.0)
    if "confidence_floor" in rules:
        values["confidence_floor"] = _unit("confidence_floor", rules["confidence_floor"])
    if "conditions" in rules:
        if rules["conditions"] not in CONDITIONS:
            raise ValueError(f"conditions must be one of {', '.join(CONDITIONS)}.")
        values["conditions"] = rules["conditions"]
    return Profile(**values)


def profile_out(profile: Profile) -> dict:
    """The profile as the API answers it: its weights, confidence_floor and conditions."""
    data = asdict(profile)
    return {
        "weights": {name: data[name] for name in WEIGHT_NAMES},
        **{name: data[name] for name in RULE_NAMES},
    }


def stored_profile_out(ns) -> dict | None:
    """A namespace's stored ``weights`` and ``retrieval`` rules as ``/rank`` answers them; None
    when they are not a valid profile (``/rank`` answers 409 for that namespace)."""
    try:
        return profile_out(profile_from(ns.weights or None, ns.retrieval or None))
    except ValueError:
        return None


def eligibility(inputs: RankingInputs, profile: Profile) -> tuple[bool, str | None]:
    """Whether the object may be offered, and why not. DEPRECATED never is (SPEC §12)."""
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
    """One candidate's score and eligibility at the clock ``now``."""
    hot = hotness(inputs.uses, inputs.last_use_at, inputs.created_at, now)
    state = ObjectState(
        epistemic_type=inputs.epistemic_type,
        confidence=inputs.confidence,
        salience_base=inputs.salience_base,
        decay_profile=inputs.decay_profile,
        condition_state=inputs.condition_state,
        pinned=inputs.pinned,
        reinforcement_boost=inputs.reinforcement_boost,
        last_reinforced_at=inputs.last_reinforced_at,
    )
    salience = salience_effective(state, inputs.created_at, now)
    weights = RankWeights(profile.similarity, profile.hotness, profile.utility)
    # The §12 sum first, in its own order, so the three-weight profile is bit-identical to it;
    # a zero weight adds an exact 0.0.
    score = rank_score(similarity, hot, inputs.utility, weights)
    score = score + profile.confidence * inputs.confidence + profile.salience * salience
    eligible, reason = eligibility(inputs, profile)
    return Ranked(score, eligible, reason, hot, salience)


def order_key(eligible: bool, score: float, object_id: str) -> tuple:
    """Eligible first, then best score, then object id (a stable order for equal scores)."""
    return (not eligible, -score, object_id)
