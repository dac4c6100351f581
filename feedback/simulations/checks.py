"""The RFC-0008 §11 benchmark suite's exact checks (no randomness): asymptote, session cap,
independence, corrected floor. ``feedback.suite`` runs them with the replay check on the database.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta

from feedback.simulations.common import EPOCH, Progress, make_signal, report_progress
from rms.policy import (
    ASSERTED,
    CONFIRMED,
    CORRECTED,
    CORRECTED_FLOOR,
    CORROBORATED_BY_EXTERNAL,
    GLOBAL_CEILING,
    HYPOTHETICAL,
    INFERRED,
    OBSERVED,
    SESSION_CAP,
    SIGNALS,
    TASK_COMPLETED_WITH,
    UNVERIFIED,
    ObjectState,
    SessionTally,
    apply_signal,
    ceiling_for,
    initial_state,
)

# --- RFC-0008 §11 benchmark suite -----------------------------------------------------------------


def check_result(name: str, title: str, passed: bool, measured: dict) -> dict:
    """One benchmark check as the suite reports it."""
    return {"name": name, "title": title, "passed": bool(passed), "measured": measured}


def _check_asymptote() -> dict:
    """1000 CONFIRMED, each in its own session so the cap cannot hide an overshoot."""
    measured: dict[str, dict[str, float]] = {}
    ok = True
    for epistemic_type in (OBSERVED, ASSERTED, INFERRED, HYPOTHETICAL, UNVERIFIED):
        state = initial_state(epistemic_type=epistemic_type)
        ceiling = ceiling_for(epistemic_type)
        assert ceiling is not None
        highest = state.confidence
        for k in range(1000):
            state = apply_signal(
                state,
                make_signal(
                    CONFIRMED,
                    actor_id="user-1",
                    actor_type="HUMAN_USER",
                    session_id=f"asymptote-{k}",
                    ts=EPOCH + timedelta(minutes=k),
                ),
                SessionTally(),
            ).state
            highest = max(highest, state.confidence)
        ok = ok and highest <= ceiling and highest <= GLOBAL_CEILING
        measured[epistemic_type] = {
            "ceiling": ceiling,
            "max_confidence": highest,
            "final_confidence": state.confidence,
        }
    return check_result(
        "asymptote",
        "1000 CONFIRMED signals never take confidence above 0.97 (or the type's ceiling).",
        ok and measured[OBSERVED]["max_confidence"] <= 0.97,
        measured,
    )


def _check_session_cap() -> dict:
    """Many positive signals from distinct actors in one session stop at Σγ_eff = 0.40."""
    state = initial_state(epistemic_type=INFERRED, confidence=0.10)
    tally = SessionTally()
    gammas: list[float] = []
    capped_after = None
    for k in range(20):
        signal_type = (CONFIRMED, TASK_COMPLETED_WITH, CORROBORATED_BY_EXTERNAL)[k % 3]
        outcome = apply_signal(
            state,
            make_signal(
                signal_type,
                actor_id=f"user-{k}",
                actor_type="HUMAN_USER",
                session_id="cap-1",
                ts=EPOCH + timedelta(seconds=k),
            ),
            tally,
        )
        state, tally = outcome.state, outcome.tally
        gammas.append(outcome.payload["gamma_effective"])
        if capped_after is None and outcome.payload["cap_applied"]:
            capped_after = k
    total = math.fsum(gammas)
    # A new session_id has its own room again.
    fresh = apply_signal(
        state,
        make_signal(
            CONFIRMED,
            actor_id="user-0",
            actor_type="HUMAN_USER",
            session_id="cap-2",
            ts=EPOCH + timedelta(minutes=1),
        ),
        SessionTally(),
    )
    passed = (
        abs(total - SESSION_CAP) <= 1e-12
        and tally.gamma_total <= SESSION_CAP + 1e-12
        and capped_after is not None
        and all(g == 0.0 for g in gammas[capped_after + 1 :])
        and fresh.payload["gamma_effective"] > 0
    )
    return check_result(
        "session_cap",
        "Signals in one session stop at Σγ_eff = 0.40; a new session has room again.",
        passed,
        {
            "signals": len(gammas),
            "sum_gamma_effective": total,
            "session_gamma_total": tally.gamma_total,
            "cap": SESSION_CAP,
            "first_capped_signal": capped_after,
            "confidence_after_session": state.confidence,
            "next_session_gamma_effective": fresh.payload["gamma_effective"],
        },
    )


def _check_independence() -> dict:
    """RFC-0008 §5: a correlated AI agent gets ×0.4; independent evidence or a human gets 1×."""
    base = initial_state(epistemic_type=ASSERTED, confidence=0.50, evidence_ids=("src-shared",))
    full = SIGNALS[CONFIRMED].base_weight * 1.0
    discounted = full * 0.4

    def single(actor_type: str, evidence: tuple[str, ...]) -> float:
        return apply_signal(
            base,
            make_signal(
                CONFIRMED,
                actor_id="actor",
                actor_type=actor_type,
                session_id="independence",
                ts=EPOCH,
                evidence_ids=evidence,
            ),
            SessionTally(),
        ).payload["gamma_effective"]

    cases = {
        "agent_no_evidence": (single("AI_AGENT", ()), discounted),
        "agent_shared_evidence": (single("AI_AGENT", ("src-shared",)), discounted),
        "agent_disjoint_evidence": (single("AI_AGENT", ("own-1",)), full),
        "human_user": (single("HUMAN_USER", ()), full),
    }

    def evolve(correlated: bool) -> list[float]:
        # Two agents confirm once per session for 10 sessions. The correlated pair cites the
        # object's own source; the independent pair brings fresh evidence every time.
        state = base
        curve = [state.confidence]
        for k in range(10):
            tally = SessionTally()
            for agent in ("agent-a", "agent-b"):
                evidence = ("src-shared",) if correlated else (f"{agent}-ev-{k}",)
                outcome = apply_signal(
                    state,
                    make_signal(
                        CONFIRMED,
                        actor_id=agent,
                        actor_type="AI_AGENT",
                        session_id=f"pair-{k}",
                        ts=EPOCH + timedelta(days=k),
                        evidence_ids=evidence,
                    ),
                    tally,
                )
                state, tally = outcome.state, outcome.tally
            curve.append(state.confidence)
        return curve

    with_pair = evolve(correlated=True)
    without_pair = evolve(correlated=False)
    passed = all(abs(got - want) <= 1e-12 for got, want in cases.values()) and all(
        a <= b for a, b in zip(with_pair, without_pair, strict=True)
    )
    passed = passed and with_pair[-1] < without_pair[-1]
    return check_result(
        "independence_discount",
        "An AI agent with no or shared evidence gets ×0.4; disjoint evidence or a human, full "
        "weight; a correlated pair moves confidence less than an independent one.",
        passed,
        {
            **{
                name: {"gamma_effective": got, "expected": want}
                for name, (got, want) in cases.items()
            },
            "correlated_pair_confidence": with_pair,
            "independent_pair_confidence": without_pair,
        },
    )


def _check_corrected_floor() -> dict:
    """CORRECTED never takes confidence below 0.05 and never raises it."""

    def corrected(state: ObjectState, k: int) -> ObjectState:
        return apply_signal(
            state,
            make_signal(
                CORRECTED,
                actor_id="user-1",
                actor_type="HUMAN_USER",
                session_id=f"floor-{k}",
                ts=EPOCH + timedelta(minutes=k),
            ),
            SessionTally(),
        ).state

    state = initial_state(epistemic_type=OBSERVED)
    trajectory = [state.confidence]
    for k in range(100):
        state = corrected(state, k)
        trajectory.append(state.confidence)
    monotone = all(b <= a for a, b in zip(trajectory, trajectory[1:], strict=False))
    single = corrected(initial_state(epistemic_type=OBSERVED, confidence=0.06), 0).confidence
    below = corrected(initial_state(epistemic_type=OBSERVED, confidence=0.03), 0).confidence
    passed = (
        min(trajectory) >= CORRECTED_FLOOR
        and monotone
        and trajectory[-1] == CORRECTED_FLOOR
        and single == CORRECTED_FLOOR
        and below == 0.03
    )
    return check_result(
        "corrected_floor",
        "Repeated CORRECTED never goes below 0.05 and never raises confidence.",
        passed,
        {
            "signals": 100,
            "min_confidence": min(trajectory),
            "final_confidence": trajectory[-1],
            "monotone_non_increasing": monotone,
            "single_from_0_06": single,
            "single_from_0_03": below,
        },
    )


#: The exact RFC-0008 §11 checks, each with its weight in the progress (the asymptote's 5,000
#: signals take longest). The replay of 100 objects (SPEC §14) needs the stored log:
#: ``feedback.suite`` runs it after these.
EXACT_CHECKS: tuple[tuple[int, Callable[[], dict]], ...] = (
    (4, _check_asymptote),
    (1, _check_session_cap),
    (1, _check_independence),
    (1, _check_corrected_floor),
)


def exact_checks(progress: Progress | None = None) -> list[dict]:
    """Run the exact benchmark checks (no randomness); ``progress`` ends at 1.0."""
    total = sum(weight for weight, _ in EXACT_CHECKS)
    checks = []
    done = 0
    for weight, run in EXACT_CHECKS:
        checks.append(run())
        done += weight
        report_progress(progress, done / total)
    return checks
