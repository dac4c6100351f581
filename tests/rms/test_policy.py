"""The pure RFC-0008 policy (SPEC §1–§5): exact numbers and properties."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rms import policy
from rms.policy import ObjectState, SessionTally, Signal

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def state(epistemic_type="OBSERVED", confidence=None, **kw) -> ObjectState:
    """A state of this type; ``confidence`` is set directly (pinned objects may sit at 1.0)."""
    base = policy.initial_state(epistemic_type=epistemic_type)
    if confidence is not None:
        kw["confidence"] = confidence
    return ObjectState(**{**base.__dict__, **kw})


def sig(
    signal_type="CONFIRMED",
    *,
    method=None,
    actor="user-1",
    actor_type="HUMAN_USER",
    session="s-1",
    evidence=(),
    ts=T0,
) -> Signal:
    return Signal(
        signal_type=signal_type,
        detection_method=policy.resolve_detection_method(signal_type, method),
        actor_id=actor,
        actor_type=actor_type,
        session_id=session,
        ts=ts,
        evidence_ids=tuple(evidence),
    )


def test_policy_module_imports_without_django():
    code = (
        "import sys; import rms.policy, rms.replay;"
        "print(any(m.startswith('django') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class TestDefaults:
    @pytest.mark.parametrize(
        ("etype", "confidence", "profile", "ceiling"),
        [
            ("OBSERVED", 0.90, "SLOW", 0.97),
            ("ASSERTED", 0.75, "MEDIUM", 0.92),
            ("INFERRED", 0.60, "FAST", 0.85),
            ("HYPOTHETICAL", 0.40, "RAPID", 0.65),
            ("CONDITIONAL", 0.60, "MEDIUM", 0.85),
            ("UNVERIFIED", 0.30, "RAPID", 0.50),
        ],
    )
    def test_type_defaults_and_ceilings(self, etype, confidence, profile, ceiling):
        s = policy.initial_state(epistemic_type=etype)
        assert (s.confidence, s.decay_profile, s.salience_base) == (confidence, profile, 0.5)
        assert policy.ceiling_for(etype) == ceiling

    def test_client_may_not_create_above_type_ceiling(self):
        with pytest.raises(policy.PolicyError) as err:
            policy.initial_state(epistemic_type="UNVERIFIED", confidence=0.51)
        assert (err.value.status, err.value.field) == (400, "confidence")

    def test_admin_may_exceed_type_ceiling_but_never_097(self):
        assert policy.initial_state(epistemic_type="UNVERIFIED", confidence=0.97, admin=True)
        with pytest.raises(policy.PolicyError):
            policy.initial_state(epistemic_type="OBSERVED", confidence=0.971, admin=True)

    def test_conditional_defaults_to_unknown_and_others_have_no_condition(self):
        assert policy.initial_state(epistemic_type="CONDITIONAL").condition_state == "UNKNOWN"
        assert policy.initial_state(epistemic_type="ASSERTED").condition_state is None
        with pytest.raises(policy.PolicyError):
            policy.initial_state(epistemic_type="ASSERTED", condition_state="TRUE")

    def test_deprecated_cannot_be_created(self):
        with pytest.raises(policy.PolicyError):
            policy.initial_state(epistemic_type="DEPRECATED")


class TestReinforcement:
    def test_confirmed_on_observed(self):
        out = policy.reinforce(state(), sig(), SessionTally())
        assert out.effect == "reinforced"
        assert out.state.confidence == 0.9 + 0.15 * (1 - 0.9) == pytest.approx(0.915, abs=1e-15)
        assert out.state.salience_base == 0.5 + 0.15 * 0.5 * 0.5 == 0.5375
        assert out.state.reinforcement_count == 1
        assert out.state.reinforcement_boost == 0.15
        assert out.state.last_reinforced_at == T0
        p = out.payload
        assert (p["gamma"], p["gamma_effective"], p["gamma_before_cap"]) == (0.15, 0.15, 0.15)
        assert p["repeat_index"] == 1 and p["session_gamma_total"] == 0.15
        assert p["cap_applied"] is False and p["correlation_discount_applied"] is False
        assert p["policy_version"] == "confidence_v1"

    def test_repeat_in_session_is_divided_by_n(self):
        first = policy.reinforce(state(), sig(), SessionTally())
        second = policy.reinforce(first.state, sig(), first.tally)
        assert second.payload["repeat_index"] == 2
        assert second.payload["gamma_effective"] == 0.075
        assert second.state.confidence == pytest.approx(0.921375, abs=1e-15)
        third = policy.reinforce(second.state, sig(), second.tally)
        assert third.payload["gamma_effective"] == pytest.approx(0.05, abs=1e-15)

    def test_repeat_count_is_per_actor_and_type(self):
        first = policy.reinforce(state(), sig(), SessionTally())
        other_actor = policy.reinforce(first.state, sig(actor="user-2"), first.tally)
        other_type = policy.reinforce(first.state, sig("TASK_COMPLETED_WITH"), first.tally)
        assert other_actor.payload["repeat_index"] == 1
        assert other_type.payload["repeat_index"] == 1

    def test_session_cap_040(self):
        s, tally = state("INFERRED"), SessionTally()
        effective = []
        for actor in ("a", "b", "c", "d"):
            out = policy.reinforce(s, sig(actor=actor), tally)
            s, tally = out.state, out.tally
            effective.append(out.payload["gamma_effective"])
        assert effective[:2] == [0.15, 0.15]
        assert effective[2] == pytest.approx(0.10, abs=1e-12)
        assert effective[3] == 0.0
        assert tally.gamma_total == pytest.approx(0.40, abs=1e-12)
        assert out.payload["cap_applied"] is True

    def test_capped_signal_changes_nothing_but_counts_for_n_and_evidence(self):
        tally = SessionTally(gamma_total=0.40)
        before = state(evidence_ids=("e1",))
        out = policy.reinforce(before, sig(evidence=("e2",)), tally)
        assert out.payload["gamma_effective"] == 0.0 and out.payload["cap_applied"]
        assert out.state.confidence == before.confidence
        assert out.state.reinforcement_count == 0 and out.state.last_reinforced_at is None
        assert out.state.evidence_ids == ("e1", "e2")
        assert out.tally.repeats[SessionTally.key("user-1", "CONFIRMED")] == 1

    def test_room_below_epsilon_counts_as_zero(self):
        out = policy.reinforce(state(), sig(), SessionTally(gamma_total=0.40 - 1e-10))
        assert out.payload["gamma_effective"] == 0.0

    def test_other_session_has_its_own_cap(self):
        out = policy.reinforce(state(), sig(session="s-2"), SessionTally())
        assert out.payload["gamma_effective"] == 0.15

    def test_detection_discount(self):
        out = policy.reinforce(state(), sig("REFERENCED"), SessionTally())
        assert out.payload["detection_method"] == "response_analysis"
        assert out.payload["reliability_class"] == "LOW"
        assert out.payload["gamma_effective"] == 0.04
        behav = policy.reinforce(
            state(), sig("REFERENCED", method="implicit_behavioural"), SessionTally()
        )
        assert behav.payload["gamma_effective"] == 0.02

    @pytest.mark.parametrize(
        ("actor_type", "obj_evidence", "sig_evidence", "correlated", "gamma"),
        [
            ("AI_AGENT", (), (), True, 0.15 * 0.4),
            ("AI_AGENT", ("doc-1",), ("doc-1",), True, 0.15 * 0.4),
            ("AI_AGENT", ("doc-1",), ("doc-2",), False, 0.15),
            ("HUMAN_USER", ("doc-1",), ("doc-1",), False, 0.15),
            ("HUMAN_USER", (), (), False, 0.15),
        ],
    )
    def test_independence_discount(self, actor_type, obj_evidence, sig_evidence, correlated, gamma):
        out = policy.reinforce(
            state(evidence_ids=obj_evidence),
            sig(actor_type=actor_type, evidence=sig_evidence),
            SessionTally(),
        )
        assert out.payload["correlation_discount_applied"] is correlated
        assert out.payload["gamma_effective"] == gamma
        assert out.payload["provenance_missing"] is (actor_type == "AI_AGENT" and not sig_evidence)

    def test_ceiling_clamps_and_never_lowers(self):
        out = policy.reinforce(state("UNVERIFIED", 0.49), sig(), SessionTally())
        assert out.state.confidence == 0.5 and out.payload["ceiling_applied"]
        above = state("ASSERTED", 0.95)  # an admin created it above the type ceiling
        out = policy.reinforce(above, sig(), SessionTally())
        assert out.state.confidence == 0.95 and out.payload["ceiling_applied"]

    def test_thousand_confirmed_never_exceed_097(self):
        s = state("OBSERVED")
        for i in range(1000):
            s = policy.reinforce(s, sig(session=f"s-{i}"), SessionTally()).state
            assert s.confidence <= 0.97
        assert s.confidence == 0.97

    def test_deprecated_and_false_condition_are_rejected(self):
        dep = state(epistemic_type="ASSERTED")
        dep = ObjectState(**{**dep.__dict__, "epistemic_type": "DEPRECATED"})
        out = policy.apply_signal(dep, sig(), SessionTally())
        assert out.effect == "rejected" and "DEPRECATED" in out.reason
        assert out.state == dep and out.tally == SessionTally()
        cond = state("CONDITIONAL")
        assert policy.apply_signal(cond, sig(), SessionTally()).effect == "rejected"
        true = ObjectState(**{**cond.__dict__, "condition_state": "TRUE"})
        assert policy.apply_signal(true, sig(), SessionTally()).effect == "reinforced"

    def test_negative_signals_apply_to_deprecated(self):
        dep = ObjectState(**{**state("ASSERTED").__dict__, "epistemic_type": "DEPRECATED"})
        out = policy.apply_signal(dep, sig("CORRECTED"), SessionTally())
        assert out.effect == "penalized" and out.state.confidence == 0.75 * 0.75


class TestPenalty:
    def test_corrected(self):
        out = policy.penalize(state("ASSERTED"), sig("CORRECTED"))
        assert out.state.confidence == 0.75 * (1 - 0.25) == 0.5625
        assert out.state.salience_base == 0.5 * (1 - 0.3 * 0.25)
        assert out.payload["delta"] == 0.25 and out.payload["floor_applied"] is False

    def test_corrected_floor_005(self):
        out = policy.penalize(state("ASSERTED", 0.06), sig("CORRECTED"))
        assert out.state.confidence == 0.05 and out.payload["floor_applied"]

    def test_corrected_floor_never_raises(self):
        out = policy.penalize(state("ASSERTED", 0.04), sig("CORRECTED"))
        assert out.state.confidence == 0.04

    def test_repeated_corrections_stop_at_floor(self):
        s = state("ASSERTED")
        for _ in range(50):
            s = policy.penalize(s, sig("CORRECTED")).state
        assert s.confidence == 0.05

    def test_other_penalties_have_no_floor(self):
        s = state("ASSERTED", 0.06)
        out = policy.penalize(s, sig("CONTRADICTED_BY_OBSERVATION"))
        assert out.state.confidence == 0.06 * 0.8

    def test_discounted_penalty(self):
        out = policy.penalize(
            state("ASSERTED"), sig("TASK_FAILED_WITH", method="implicit_behavioural")
        )
        assert out.payload["delta"] == 0.1 * 0.25

    def test_a_penalty_carries_the_session_tally_unchanged(self):
        tally = SessionTally(0.3, {SessionTally.key("user-1", "CONFIRMED"): 2})
        out = policy.apply_signal(state("ASSERTED"), sig("CORRECTED"), tally)
        assert out.effect == "penalized" and out.tally is tally
        assert out.tally == SessionTally(0.3, {SessionTally.key("user-1", "CONFIRMED"): 2})
        assert policy.penalize(state("ASSERTED"), sig("CORRECTED")).tally == SessionTally()

    def test_unused_changes_nothing(self):
        s = state()
        out = policy.apply_signal(s, sig("UNUSED"), SessionTally())
        assert out.effect == "unused" and out.state == s and out.op_type is None

    def test_neutral_outcome_is_what_apply_signal_decides_for_unused(self):
        full = policy.apply_signal(state(), sig("UNUSED"), SessionTally())
        quick = policy.neutral_outcome(sig("UNUSED"))
        assert (quick.effect, quick.payload, quick.reason, quick.op_type) == (
            full.effect,
            full.payload,
            full.reason,
            full.op_type,
        )
        assert (quick.state, quick.tally) == (None, None)


class TestAdminChanges:
    def test_pin_limits(self):
        assert policy.pin(state("OBSERVED"), 1.0).confidence == 1.0
        with pytest.raises(policy.PolicyError):
            policy.pin(state("ASSERTED"), 0.93)
        assert policy.pin(state("ASSERTED"), 0.92).confidence == 0.92
        assert policy.pin(state("ASSERTED")).confidence == 0.75

    def test_unpin_clamps(self):
        pinned = policy.pin(state("OBSERVED"), 1.0)
        assert policy.unpin(pinned).confidence == 0.97
        with pytest.raises(policy.PolicyError):
            policy.unpin(state())

    @pytest.mark.parametrize(
        ("frm", "to", "ok"),
        [
            ("UNVERIFIED", "ASSERTED", True),
            ("INFERRED", "ASSERTED", True),
            ("HYPOTHETICAL", "ASSERTED", True),
            ("CONDITIONAL", "ASSERTED", True),
            ("ASSERTED", "OBSERVED", True),
            ("OBSERVED", "DEPRECATED", True),
            ("HYPOTHETICAL", "OBSERVED", False),
            ("OBSERVED", "ASSERTED", False),
            ("ASSERTED", "UNVERIFIED", False),
        ],
    )
    def test_transitions(self, frm, to, ok):
        if ok:
            assert policy.transition(state(frm), to).epistemic_type == to
        else:
            with pytest.raises(policy.PolicyError) as err:
                policy.transition(state(frm), to)
            assert err.value.status == 409

    def test_nothing_leaves_deprecated(self):
        dep = policy.transition(state("ASSERTED"), "DEPRECATED")
        with pytest.raises(policy.PolicyError):
            policy.transition(dep, "ASSERTED")
        with pytest.raises(policy.PolicyError):
            policy.pin(dep)


class TestDecay:
    def test_salience_effective(self):
        s = state("ASSERTED", salience_base=0.5, reinforcement_boost=0.15, last_reinforced_at=T0)
        now = T0 + timedelta(days=10)
        expected = 0.5 * math.exp(-0.02 * 10) + 0.15 * math.exp(-0.10 * 10)
        assert policy.salience_effective(s, T0, now) == pytest.approx(expected, abs=1e-15)

    def test_clock_from_created_at_without_reinforcement(self):
        s = state("INFERRED")
        value = policy.salience_effective(s, T0, T0 + timedelta(days=1))
        assert value == pytest.approx(0.5 * math.exp(-0.07), abs=1e-15)

    def test_pinned_and_permanent_do_not_decay(self):
        later = T0 + timedelta(days=400)
        assert policy.salience_effective(state(pinned=True), T0, later) == 0.5
        assert policy.salience_effective(state(decay_profile="PERMANENT"), T0, later) == 0.5


# --- properties -----------------------------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
types = st.sampled_from(["OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED"])
positives = st.sampled_from(
    ["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORROBORATED_BY_EXTERNAL"]
)
negatives = st.sampled_from(
    ["CORRECTED", "CONTRADICTED_BY_OBSERVATION", "TASK_FAILED_WITH", "IGNORED_REPEATEDLY"]
)
methods = st.sampled_from(sorted(policy.DETECTION_METHODS))
actor_types = st.sampled_from(policy.ACTOR_TYPES)
gamma_totals = st.floats(min_value=0.0, max_value=0.6, allow_nan=False)


@given(types, unit, unit, positives, methods, actor_types, gamma_totals, st.integers(0, 5))
def test_reinforcement_bounded_never_lowers_never_above_ceiling(
    etype, c, s, signal_type, method, actor_type, total, repeats
):
    ceiling = policy.ceiling_for(etype)
    start = state(etype, salience_base=s, confidence=min(c, ceiling))
    tally = SessionTally(total, {SessionTally.key("user-1", signal_type): repeats})
    out = policy.reinforce(start, sig(signal_type, method=method, actor_type=actor_type), tally)
    assert 0.0 <= out.state.confidence <= 1.0
    assert out.state.confidence >= start.confidence
    assert out.state.confidence <= ceiling
    assert out.state.salience_base >= start.salience_base
    assert out.tally.gamma_total <= max(total, policy.SESSION_CAP) + 1e-12


@given(types, unit, unit, negatives, methods)
def test_penalty_bounded_and_never_raises(etype, c, s, signal_type, method):
    start = state(etype, confidence=c, salience_base=s)
    out = policy.penalize(start, sig(signal_type, method=method))
    assert 0.0 <= out.state.confidence <= start.confidence
    assert 0.0 <= out.state.salience_base <= start.salience_base


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=60), types)
def test_any_history_stays_in_unit_interval_and_under_ceiling(history, etype):
    s, tallies = state(etype), {}
    for positive, session in history:
        signal = sig("CONFIRMED" if positive else "CORRECTED", session=f"s{session}")
        out = policy.apply_signal(s, signal, tallies.get(session, SessionTally()))
        s, tallies[session] = out.state, out.tally
        assert 0.0 <= s.confidence <= policy.ceiling_for(etype)
