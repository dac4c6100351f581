"""RFC-0008 confidence policy, ``confidence_v1`` (SPEC §1–§5). Pure: no Django imports.

Everything that changes a memory object's confidence or salience goes through the functions in
this module: the live services, replay, the simulations and the tests all call the same code, so
a replayed state is bit-identical to the stored one (SPEC §6). The order of floating-point
operations below is part of the contract; do not "simplify" an expression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime

POLICY_VERSION = "confidence_v1"

# --- SPEC §1: epistemic types (FIXED) -------------------------------------------------------------
OBSERVED = "OBSERVED"
ASSERTED = "ASSERTED"
INFERRED = "INFERRED"
HYPOTHETICAL = "HYPOTHETICAL"
CONDITIONAL = "CONDITIONAL"
UNVERIFIED = "UNVERIFIED"
DEPRECATED = "DEPRECATED"

EPISTEMIC_TYPES = (OBSERVED, ASSERTED, INFERRED, HYPOTHETICAL, CONDITIONAL, UNVERIFIED, DEPRECATED)

#: Reinforcement ceiling per type. DEPRECATED is never reinforced, so it has none.
TYPE_CEILING: dict[str, float | None] = {
    OBSERVED: 0.97,
    ASSERTED: 0.92,
    INFERRED: 0.85,
    HYPOTHETICAL: 0.65,
    CONDITIONAL: 0.85,
    UNVERIFIED: 0.50,
    DEPRECATED: None,
}
DEFAULT_DECAY_PROFILE = {
    OBSERVED: "SLOW",
    ASSERTED: "MEDIUM",
    INFERRED: "FAST",
    HYPOTHETICAL: "RAPID",
    CONDITIONAL: "MEDIUM",
    UNVERIFIED: "RAPID",
}
DEFAULT_CONFIDENCE = {
    OBSERVED: 0.90,
    ASSERTED: 0.75,
    INFERRED: 0.60,
    HYPOTHETICAL: 0.40,
    CONDITIONAL: 0.60,
    UNVERIFIED: 0.30,
}
#: No reinforcement ever takes confidence above this; only a PIN of an OBSERVED object does.
GLOBAL_CEILING = 0.97
PIN_MAX_OBSERVED = 1.0
DEFAULT_SALIENCE_BASE = 0.5

#: Allowed EPISTEMIC_TRANSITIONs (SPEC §1); any type may also go to DEPRECATED; nothing leaves it.
TRANSITIONS = {
    (UNVERIFIED, ASSERTED),
    (INFERRED, ASSERTED),
    (HYPOTHETICAL, ASSERTED),
    (CONDITIONAL, ASSERTED),
    (ASSERTED, OBSERVED),
}

CONDITION_STATES = ("UNKNOWN", "TRUE", "FALSE", "EXPIRED")

# --- SPEC §1: decay (FIXED), computed at read time, never written back ----------------------------
DECAY_RATES = {"PERMANENT": 0.0, "SLOW": 0.005, "MEDIUM": 0.020, "FAST": 0.070, "RAPID": 0.200}
DECAY_PROFILES = tuple(DECAY_RATES)
BOOST_DECAY_RATE = 0.10

# --- SPEC §2: signals -----------------------------------------------------------------------------
POSITIVE = "positive"
NEGATIVE = "negative"
NEUTRAL = "neutral"


# The one place that names the signal types: every other module uses these constants and the
# tables derived below, so adding a type is a row in SIGNALS (and the migration makemigrations
# writes when the row names an aggregate total).
REFERENCED = "REFERENCED"
CONFIRMED = "CONFIRMED"
TASK_COMPLETED_WITH = "TASK_COMPLETED_WITH"
CORROBORATED_BY_EXTERNAL = "CORROBORATED_BY_EXTERNAL"
CORRECTED = "CORRECTED"
CONTRADICTED_BY_OBSERVATION = "CONTRADICTED_BY_OBSERVATION"
TASK_FAILED_WITH = "TASK_FAILED_WITH"
IGNORED_REPEATEDLY = "IGNORED_REPEATEDLY"
UNUSED = "UNUSED"


@dataclass(frozen=True)
class SignalSpec:
    kind: str
    base_weight: float
    primary_method: str
    #: Makes an injected object "used" in its session (SPEC §12; usage_ratio, SPEC §8).
    used: bool = False
    #: The per-object aggregate field that counts this type (SPEC §8), or None for no total.
    total_field: str | None = None


SIGNALS: dict[str, SignalSpec] = {
    REFERENCED: SignalSpec(
        POSITIVE, 0.08, "response_analysis", used=True, total_field="total_referenced"
    ),
    CONFIRMED: SignalSpec(
        POSITIVE, 0.15, "explicit_user", used=True, total_field="total_confirmed"
    ),
    TASK_COMPLETED_WITH: SignalSpec(
        POSITIVE, 0.12, "tool_validation", used=True, total_field="total_task_completed"
    ),
    CORROBORATED_BY_EXTERNAL: SignalSpec(POSITIVE, 0.10, "external_crosscheck"),
    CORRECTED: SignalSpec(NEGATIVE, 0.25, "explicit_user", total_field="total_corrected"),
    CONTRADICTED_BY_OBSERVATION: SignalSpec(NEGATIVE, 0.20, "observation"),
    TASK_FAILED_WITH: SignalSpec(NEGATIVE, 0.10, "tool_validation"),
    IGNORED_REPEATEDLY: SignalSpec(NEGATIVE, 0.05, "injection_tracking"),
    UNUSED: SignalSpec(NEUTRAL, 0.0, "response_analysis", total_field="total_unused"),
}
SIGNAL_TYPES = tuple(SIGNALS)
#: Only the service's own sweep produces these (SPEC §2).
SYSTEM_ONLY_SIGNALS = frozenset({IGNORED_REPEATEDLY})
SYSTEM_ONLY_METHODS = frozenset({"injection_tracking"})
#: The signals that make an injected object "used" in a session (SPEC §12). CORRECTED and the other
#: negative signals are deliberately absent: being corrected is not being useful.
USED_SIGNALS = frozenset(t for t, spec in SIGNALS.items() if spec.used)
#: Signal type -> its aggregate total field (SPEC §8), in policy order.
TOTAL_FIELDS: dict[str, str] = {
    t: spec.total_field for t, spec in SIGNALS.items() if spec.total_field is not None
}
#: What response analysis answers for an injected object: used or not (SPEC §7, API ``/detect``).
DETECTED_SIGNAL_TYPES = (REFERENCED, UNUSED)


def signals_of_kind(kind: str) -> frozenset[str]:
    """The signal types of one kind (positive, negative, neutral) in the policy (SPEC §2)."""
    return frozenset(t for t, spec in SIGNALS.items() if spec.kind == kind)


#: detection_method -> (reliability class, weight discount r)
DETECTION_METHODS: dict[str, tuple[str, float]] = {
    "explicit_user": ("HIGH", 1.0),
    "structured_evaluation": ("HIGH", 1.0),
    "tool_validation": ("MEDIUM", 1.0),
    "external_crosscheck": ("MEDIUM", 1.0),
    "observation": ("MEDIUM", 1.0),
    "injection_tracking": ("LOW", 1.0),
    "response_analysis": ("LOW", 0.5),
    "implicit_behavioural": ("VERY_LOW", 0.25),
}

ACTOR_TYPES = ("HUMAN_USER", "AI_AGENT", "SYSTEM_PROCESS", "EXTERNAL_CONNECTOR")

# --- SPEC §3/§4: constants of the update rules ----------------------------------------------------
CORRELATION_FACTOR = 0.4  # RFC-0008 §5 agent independence discount
SESSION_CAP = 0.40  # Σ γ_eff per object per session_id
CAP_EPSILON = 1e-9  # room below this counts as no room
SALIENCE_GAIN = 0.5  # salience moves at half the confidence step
SALIENCE_PENALTY = 0.3  # salience penalty is 30% of δ
CORRECTED_FLOOR = 0.05

EFFECT_REINFORCED = "reinforced"
EFFECT_PENALIZED = "penalized"
EFFECT_UNUSED = "unused"
EFFECT_REJECTED = "rejected"


class PolicyError(Exception):
    """A request the policy refuses. ``status`` is the HTTP status the API maps it to."""

    def __init__(self, code: str, message: str, status: int = 409, field: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field


@dataclass(frozen=True)
class ObjectState:
    """Everything the policy reads and writes on a memory object."""

    epistemic_type: str
    decay_profile: str
    confidence: float
    salience_base: float
    condition_state: str | None = None
    reinforcement_boost: float = 0.0
    reinforcement_count: int = 0
    last_reinforced_at: datetime | None = None
    pinned: bool = False
    evidence_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Signal:
    signal_type: str
    detection_method: str
    actor_id: str
    actor_type: str
    session_id: str
    ts: datetime
    evidence_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionTally:
    """What one object has already received in one session_id (SPEC §3).

    ``repeats`` counts earlier positive, non-rejected signals per (actor_id, signal_type);
    ``gamma_total`` is Σ γ_eff applied so far.
    """

    gamma_total: float = 0.0
    repeats: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def key(actor_id: str, signal_type: str) -> str:
        return f"{actor_id}\x1f{signal_type}"


@dataclass
class TallyChanges:
    """The session tallies a write moved: ``new`` as (object id, session_id, tally), ``changed``
    as (stored row's key, object id, session_id, tally)."""

    new: list[tuple]
    changed: list[tuple]


class TallyLedger:
    """The session tallies of the (object, session_id) pairs a write holds locked: the stored
    ones ({(object id, session_id): (row key, SessionTally)}) and those it put back, which
    :meth:`changes` lists. A pair without a stored tally starts from an empty one."""

    def __init__(self, stored: dict | None = None) -> None:
        self._stored = stored or {}
        self._put: dict = {}

    def get(self, object_id, session_id: str) -> SessionTally:
        key = (object_id, session_id)
        tally = self._put.get(key)
        if tally is None:
            found = self._stored.get(key)
            tally = found[1] if found else SessionTally()
        return tally

    def put(self, object_id, session_id: str, tally: SessionTally) -> None:
        self._put[(object_id, session_id)] = tally

    def changes(self) -> TallyChanges:
        out = TallyChanges([], [])
        for (object_id, session_id), tally in self._put.items():
            found = self._stored.get((object_id, session_id))
            if found is None:
                out.new.append((object_id, session_id, tally))
            else:
                out.changed.append((found[0], object_id, session_id, tally))
        return out


@dataclass(frozen=True)
class Breakdown:
    """What each control of SPEC §3/§4 did to one signal, as the policy applied it.

    Weight cuts are in the units of γ or δ, in the order the controls apply (reliability, then
    correlation, then repeat, then the session cap), so ``weight_asked`` minus the four cuts is
    ``weight_applied``. ``ceiling_cut`` and ``floor_cut`` are in confidence units: how much the
    ceiling held the new confidence down, and how much of the penalty the floor held back.
    """

    weight_asked: float
    weight_applied: float
    reliability_cut: float = 0.0
    correlation_cut: float = 0.0
    repeat_cut: float = 0.0
    session_cap_cut: float = 0.0
    ceiling_cut: float = 0.0
    floor_cut: float = 0.0


@dataclass(frozen=True)
class Outcome:
    effect: str
    #: None only from :func:`neutral_outcome`, which reads neither.
    state: ObjectState | None
    tally: SessionTally | None
    payload: dict
    reason: str | None = None
    #: What each control did (REINFORCE and PENALTY outcomes only).
    breakdown: Breakdown | None = None

    @property
    def op_type(self) -> str | None:
        return _OP_TYPES.get(self.effect)


_OP_TYPES = {EFFECT_REINFORCED: "REINFORCE", EFFECT_PENALIZED: "PENALTY"}


# --- helpers --------------------------------------------------------------------------------------


def ceiling_for(epistemic_type: str) -> float | None:
    ceiling = TYPE_CEILING[epistemic_type]
    return None if ceiling is None else min(GLOBAL_CEILING, ceiling)


def resolve_detection_method(signal_type: str, detection_method: str | None) -> str:
    """A signal without a detection method gets its type's primary method (SPEC §2)."""
    return detection_method or SIGNALS[signal_type].primary_method


def initial_state(
    *,
    epistemic_type: str,
    confidence: float | None = None,
    decay_profile: str | None = None,
    salience_base: float | None = None,
    condition_state: str | None = None,
    evidence_ids: tuple[str, ...] | list[str] = (),
    admin: bool = False,
) -> ObjectState:
    """The state of a new object, with SPEC §1 defaults and limits."""
    if epistemic_type == DEPRECATED:
        raise PolicyError(
            "invalid_epistemic_type", "Objects cannot be created DEPRECATED.", 400, "epistemic_type"
        )
    ceiling = ceiling_for(epistemic_type)
    assert ceiling is not None
    if confidence is None:
        confidence = DEFAULT_CONFIDENCE[epistemic_type]
    elif confidence > (GLOBAL_CEILING if admin else ceiling):
        limit = GLOBAL_CEILING if admin else ceiling
        raise PolicyError(
            "confidence_above_ceiling",
            f"Initial confidence {confidence} is above the limit {limit} for {epistemic_type}.",
            400,
            "confidence",
        )
    if epistemic_type == CONDITIONAL:
        condition_state = condition_state or "UNKNOWN"
    elif condition_state not in (None, "UNKNOWN"):
        raise PolicyError(
            "condition_not_allowed",
            "condition_state applies only to CONDITIONAL objects.",
            400,
            "condition_state",
        )
    else:
        condition_state = None
    return ObjectState(
        epistemic_type=epistemic_type,
        decay_profile=decay_profile or DEFAULT_DECAY_PROFILE[epistemic_type],
        confidence=float(confidence),
        salience_base=DEFAULT_SALIENCE_BASE if salience_base is None else float(salience_base),
        condition_state=condition_state,
        evidence_ids=tuple(sorted(set(evidence_ids))),
    )


def rejection_reason(state: ObjectState) -> str | None:
    """Why a positive signal may not reinforce this object (SPEC §3), or None."""
    if state.epistemic_type == DEPRECATED:
        return "object is DEPRECATED"
    if state.epistemic_type == CONDITIONAL and state.condition_state != "TRUE":
        return f"CONDITIONAL object whose condition is {state.condition_state}"
    return None


# --- SPEC §3: reinforcement -----------------------------------------------------------------------


def reinforce(state: ObjectState, signal: Signal, tally: SessionTally) -> Outcome:
    """Apply one positive signal, in the exact order of SPEC §3."""
    spec = SIGNALS[signal.signal_type]
    reliability, r = DETECTION_METHODS[signal.detection_method]
    reason = rejection_reason(state)
    if reason is not None:
        return Outcome(EFFECT_REJECTED, state, tally, {"reason": reason}, reason)

    gamma0 = spec.base_weight
    gamma1 = gamma0 * r
    signal_evidence = set(signal.evidence_ids)
    correlated = signal.actor_type == "AI_AGENT" and (
        not signal_evidence or bool(signal_evidence & set(state.evidence_ids))
    )
    provenance_missing = signal.actor_type == "AI_AGENT" and not signal_evidence
    gamma2 = gamma1 * CORRELATION_FACTOR if correlated else gamma1
    key = SessionTally.key(signal.actor_id, signal.signal_type)
    n = 1 + tally.repeats.get(key, 0)
    gamma3 = gamma2 / n
    room = SESSION_CAP - tally.gamma_total
    if room < CAP_EPSILON:
        room = 0.0
    gamma_eff = min(gamma3, max(0.0, room))
    cap_applied = gamma_eff < gamma3

    c = state.confidence
    s = state.salience_base
    ceiling = ceiling_for(state.epistemic_type)
    assert ceiling is not None
    c_new = c + gamma_eff * (1.0 - c)
    c_raw = c_new
    ceiling_applied = False
    if c_new > ceiling:
        c_new = max(c, ceiling)
        ceiling_applied = True
    s_new = min(1.0, s + gamma_eff * SALIENCE_GAIN * (1.0 - s))

    new_total = tally.gamma_total + gamma_eff
    new_tally = SessionTally(new_total, {**tally.repeats, key: n})
    if gamma_eff > 0:
        new_state = replace(
            state,
            confidence=c_new,
            salience_base=s_new,
            reinforcement_count=state.reinforcement_count + 1,
            last_reinforced_at=signal.ts,
            reinforcement_boost=gamma_eff,
            evidence_ids=tuple(sorted(set(state.evidence_ids) | signal_evidence)),
        )
    else:
        # Cap reached: nothing changes but the signal still counts for n and adds its evidence.
        c_new, s_new = c, s
        new_state = replace(
            state, evidence_ids=tuple(sorted(set(state.evidence_ids) | signal_evidence))
        )
    payload = {
        "signal_type": signal.signal_type,
        "gamma": gamma0,
        "gamma_effective": gamma_eff,
        "gamma_before_cap": gamma3,
        "correlation_discount_applied": correlated,
        "confidence_before": c,
        "confidence_after": c_new,
        "salience_before": s,
        "salience_after": s_new,
        "session_id": signal.session_id,
        "session_gamma_total": new_total,
        "signal_source": signal.actor_id,
        "policy_version": POLICY_VERSION,
        "detection_method": signal.detection_method,
        "reliability_class": reliability,
        "reliability_discount": r,
        "repeat_index": n,
        "cap_applied": cap_applied,
        "ceiling_applied": ceiling_applied,
        "provenance_missing": provenance_missing,
        "evidence_ids": sorted(signal_evidence),
    }
    breakdown = Breakdown(
        weight_asked=gamma0,
        weight_applied=gamma_eff,
        reliability_cut=gamma0 - gamma1,
        correlation_cut=gamma1 - gamma2,
        repeat_cut=gamma2 - gamma3,
        session_cap_cut=gamma3 - gamma_eff,
        ceiling_cut=c_raw - c_new if gamma_eff > 0 else 0.0,
    )
    return Outcome(EFFECT_REINFORCED, new_state, new_tally, payload, breakdown=breakdown)


# --- SPEC §4: penalty -----------------------------------------------------------------------------


def penalize(state: ObjectState, signal: Signal, tally: SessionTally | None = None) -> Outcome:
    """A penalty neither reads nor moves the session tally (SPEC §4): the outcome carries
    ``tally`` as it was given (an empty one when none is)."""
    spec = SIGNALS[signal.signal_type]
    reliability, r = DETECTION_METHODS[signal.detection_method]
    delta = spec.base_weight * r
    c = state.confidence
    s = state.salience_base
    c_new = c * (1.0 - delta)
    c_raw = c_new
    floor_applied = False
    if signal.signal_type == CORRECTED:
        floored = min(c, max(CORRECTED_FLOOR, c_new))
        floor_applied = floored != c_new
        c_new = floored
    s_new = s * (1.0 - SALIENCE_PENALTY * delta)
    new_state = replace(state, confidence=c_new, salience_base=s_new)
    payload = {
        "signal_type": signal.signal_type,
        "delta": delta,
        "delta_base": spec.base_weight,
        "confidence_before": c,
        "confidence_after": c_new,
        "salience_before": s,
        "salience_after": s_new,
        "signal_source": signal.actor_id,
        "detection_method": signal.detection_method,
        "reliability_class": reliability,
        "reliability_discount": r,
        "floor_applied": floor_applied,
        "session_id": signal.session_id,
        "evidence_ids": sorted(set(signal.evidence_ids)),
        "policy_version": POLICY_VERSION,
    }
    breakdown = Breakdown(
        weight_asked=spec.base_weight,
        weight_applied=delta,
        reliability_cut=spec.base_weight - delta,
        floor_cut=c_new - c_raw,
    )
    return Outcome(
        EFFECT_PENALIZED,
        new_state,
        SessionTally() if tally is None else tally,
        payload,
        breakdown=breakdown,
    )


def apply_signal(state: ObjectState, signal: Signal, tally: SessionTally) -> Outcome:
    """Dispatch one signal to reinforcement, penalty or the neutral UNUSED (SPEC §3–§5)."""
    kind = SIGNALS[signal.signal_type].kind
    if kind == POSITIVE:
        return reinforce(state, signal, tally)
    if kind == NEGATIVE:
        return penalize(state, signal, tally)
    # SPEC §5: UNUSED changes nothing but is recorded.
    return Outcome(EFFECT_UNUSED, state, tally, {"signal_type": signal.signal_type})


def uses_tally(signal_type: str) -> bool:
    """Whether applying this signal type reads its (object, session_id) tally: every type but
    the NEUTRAL ones (:func:`neutral_outcome`)."""
    return SIGNALS[signal_type].kind != NEUTRAL


def neutral_outcome(signal: Signal) -> Outcome:
    """A NEUTRAL signal's outcome without the object's state or tally: UNUSED changes nothing
    (SPEC §5), so a caller need not read them (three signals in four of a feedback session)."""
    return Outcome(EFFECT_UNUSED, None, None, {"signal_type": signal.signal_type})


# --- SPEC §1: pin, unpin, transitions, conditions -------------------------------------------------


def pin_limit(epistemic_type: str) -> float:
    if epistemic_type == OBSERVED:
        return PIN_MAX_OBSERVED
    ceiling = ceiling_for(epistemic_type)
    return GLOBAL_CEILING if ceiling is None else ceiling


def pin(state: ObjectState, confidence: float | None = None) -> ObjectState:
    if state.epistemic_type == DEPRECATED:
        raise PolicyError("object_deprecated", "A DEPRECATED object cannot be pinned.")
    if confidence is not None:
        limit = pin_limit(state.epistemic_type)
        if confidence > limit:
            raise PolicyError(
                "confidence_above_ceiling",
                f"Pinned confidence may be at most {limit} for {state.epistemic_type}.",
                400,
                "confidence",
            )
    return replace(
        state,
        pinned=True,
        confidence=state.confidence if confidence is None else float(confidence),
    )


def unpin(state: ObjectState) -> ObjectState:
    if not state.pinned:
        raise PolicyError("not_pinned", "The object is not pinned.")
    limit = ceiling_for(state.epistemic_type)
    limit = GLOBAL_CEILING if limit is None else limit
    return replace(state, pinned=False, confidence=min(state.confidence, limit))


def transition(state: ObjectState, to: str) -> ObjectState:
    frm = state.epistemic_type
    if frm == DEPRECATED:
        raise PolicyError("object_deprecated", "Nothing leaves DEPRECATED.")
    if to != DEPRECATED and (frm, to) not in TRANSITIONS:
        raise PolicyError("transition_not_allowed", f"{frm} cannot become {to}.")
    # CONDITIONAL is never a target: leaving it drops the condition, except into DEPRECATED,
    # which keeps the last known condition for the record.
    condition_state = state.condition_state if to == DEPRECATED else None
    return replace(state, epistemic_type=to, condition_state=condition_state)


def change_condition(state: ObjectState, condition_state: str) -> ObjectState:
    if state.epistemic_type == DEPRECATED:
        raise PolicyError("object_deprecated", "A DEPRECATED object's condition cannot change.")
    if state.epistemic_type != CONDITIONAL:
        raise PolicyError("not_conditional", "condition_state applies only to CONDITIONAL objects.")
    return replace(state, condition_state=condition_state)


# --- SPEC §1: read-time decay ---------------------------------------------------------------------


def salience_effective(state: ObjectState, created_at: datetime, now: datetime) -> float:
    """min(1, s·exp(−λt) + boost·exp(−0.10t)); pinned and PERMANENT objects do not decay."""
    if state.pinned or state.decay_profile == "PERMANENT":
        return min(1.0, state.salience_base + state.reinforcement_boost)
    since = state.last_reinforced_at or created_at
    t = max(0.0, (now - since).total_seconds() / 86400.0)
    lam = DECAY_RATES[state.decay_profile]
    return min(
        1.0,
        state.salience_base * math.exp(-lam * t)
        + state.reinforcement_boost * math.exp(-BOOST_DECAY_RATE * t),
    )
