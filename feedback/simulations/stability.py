"""The stability simulation (SPEC §14, RFC-0009 §13): does the closed loop drive confidence to
the extremes? Its verdict and the per-session confidence distribution it is judged on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import timedelta

from feedback.relevance import classify_session, sweep_decision
from feedback.simulations.common import (
    CORPUS_TYPES,
    DEFAULT_SEED,
    EPOCH,
    Progress,
    SimObject,
    make_signal,
    pick_weighted,
    report_progress,
    session_outcome,
    sim_score,
    top_indices,
)
from feedback.utility import (
    is_used,
    utility_update,
)
from rms.policy import (
    CONDITIONAL,
    CONFIRMED,
    CONTRADICTED_BY_OBSERVATION,
    CORRECTED,
    CORROBORATED_BY_EXTERNAL,
    IGNORED_REPEATEDLY,
    REFERENCED,
    TASK_COMPLETED_WITH,
    TASK_FAILED_WITH,
    UNUSED,
    SessionTally,
    apply_signal,
    initial_state,
)

#: Stability verdict (RFC-0009 §13: "confidence scores do not converge to extremes"). An object
#: "sits at an extreme" when its confidence is within NEAR_EXTREME of 0 or of its own ceiling
#: (min(0.97, type ceiling)); the ceiling is per type, so an UNVERIFIED object stuck at 0.50 is
#: as saturated as an OBSERVED one at 0.97.
NEAR_EXTREME = 0.02
#: In no session may this share of the corpus or more sit at an extreme.
MAX_EXTREME_SHARE = 0.5
#: At the last session the middle 80% of confidences must still span at least this much.
MIN_FINAL_SPREAD = 0.10
HISTOGRAM_BINS = 10


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on a sorted sequence."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def confidence_distribution(
    confidences: Sequence[float], ceilings: Sequence[float]
) -> dict[str, float | int | list[int]]:
    """Histogram, quantiles and the share of objects at an extreme, for one session's corpus."""
    if not confidences:
        raise ValueError("An empty corpus has no distribution.")
    values = sorted(confidences)
    histogram = [0] * HISTOGRAM_BINS
    for c in confidences:
        histogram[min(HISTOGRAM_BINS - 1, int(c * HISTOGRAM_BINS))] += 1
    at_extreme = sum(
        1
        for c, ceiling in zip(confidences, ceilings, strict=True)
        if c <= NEAR_EXTREME or c >= ceiling - NEAR_EXTREME
    )
    p10 = _quantile(values, 0.10)
    p90 = _quantile(values, 0.90)
    return {
        "histogram": histogram,
        "min": values[0],
        "p10": p10,
        "p50": _quantile(values, 0.50),
        "p90": p90,
        "max": values[-1],
        "mean": math.fsum(values) / len(values),
        "spread": p90 - p10,
        "extreme_share": at_extreme / len(values),
    }


def stability_verdict(series: Sequence[dict]) -> tuple[bool, str]:
    """The stability criterion over a per-session series of :func:`confidence_distribution`."""
    criterion = (
        f"In every session fewer than {MAX_EXTREME_SHARE:.0%} of objects sit within "
        f"{NEAR_EXTREME} of 0 or of their own ceiling, and at the last session the spread "
        f"p90 − p10 of confidence is at least {MIN_FINAL_SPREAD}."
    )
    if not series:
        return False, criterion
    passed = (
        all(point["extreme_share"] < MAX_EXTREME_SHARE for point in series)
        and series[-1]["spread"] >= MIN_FINAL_SPREAD
    )
    return passed, criterion


# --- stability ------------------------------------------------------------------------------------

_TOPICS = ("billing", "deploys", "oncall", "customers", "security", "roadmap")
#: Given that the model used an object, which signal reports it (plausible detector mix).
_POSITIVE_MIX = (
    (REFERENCED, 0.50),
    (TASK_COMPLETED_WITH, 0.25),
    (CONFIRMED, 0.20),
    (CORROBORATED_BY_EXTERNAL, 0.05),
)
_NEGATIVE_MIX = (
    (TASK_FAILED_WITH, 0.45),
    (CORRECTED, 0.35),
    (CONTRADICTED_BY_OBSERVATION, 0.20),
)
#: Who sends each signal type: (actor_id, actor_type).
_ACTORS = {
    REFERENCED: ("response-analyzer", "SYSTEM_PROCESS"),
    TASK_COMPLETED_WITH: ("tool-runner", "SYSTEM_PROCESS"),
    CONFIRMED: ("user-1", "HUMAN_USER"),
    CORROBORATED_BY_EXTERNAL: ("crosscheck", "EXTERNAL_CONNECTOR"),
    TASK_FAILED_WITH: ("tool-runner", "SYSTEM_PROCESS"),
    CORRECTED: ("user-1", "HUMAN_USER"),
    CONTRADICTED_BY_OBSERVATION: ("observer", "SYSTEM_PROCESS"),
}


def stability_simulation(
    seed: int = DEFAULT_SEED,
    *,
    sessions: int = 100,
    corpus_size: int = 60,
    injected_per_session: int = 8,
    streak_threshold: int = 5,
    progress: Progress | None = None,
) -> dict:
    """RFC-0009 §13 stability: does the closed loop drive confidence to the extremes?

    A fixed corpus of ``corpus_size`` objects of mixed epistemic types (a third of CONDITIONAL
    objects have a condition that is not TRUE, so they cannot be reinforced), each with a topic
    and a hidden quality (the chance that a use of it turns out right). Each session has a random
    topic; objects get a random similarity (higher on-topic), the top ``injected_per_session`` by
    the §12 score × confidence are injected — so confidence feeds back into what gets injected,
    the circular dependency of RFC-0009 §10. Each injected object is used with probability 0.6
    on-topic and 0.15 off-topic; a use is a positive signal with probability = quality, else a
    negative one, and sometimes the user also confirms; an unused object gets UNUSED. Utility is
    updated with the session outcome, and the IGNORED_REPEATEDLY sweep (SPEC §9) runs with the
    session topic as context tags. Every confidence change goes through ``rms.policy``.
    """
    if sessions < 1 or corpus_size < 1:
        raise ValueError("sessions and corpus_size must be at least 1.")
    if not 1 <= injected_per_session <= corpus_size:
        raise ValueError("injected_per_session must be between 1 and corpus_size.")
    rng = random.Random(seed)

    corpus: list[SimObject] = []
    for j in range(corpus_size):
        epistemic_type = CORPUS_TYPES[j % len(CORPUS_TYPES)]
        condition = None
        if epistemic_type == CONDITIONAL:
            condition = "TRUE" if rng.random() < 2 / 3 else "UNKNOWN"
        corpus.append(
            SimObject(
                object_id=f"obj-{j:03d}",
                state=initial_state(epistemic_type=epistemic_type, condition_state=condition),
                created_at=EPOCH,
                topic=rng.choice(_TOPICS),
                quality=rng.random(),
            )
        )

    series: list[dict] = []
    for i in range(sessions):
        number = i + 1
        now = EPOCH + timedelta(hours=6 * number)
        session_id = f"stability-{number}"
        topic = rng.choice(_TOPICS)
        similarities = [
            0.5 + 0.5 * rng.random() if obj.topic == topic else 0.5 * rng.random() for obj in corpus
        ]
        injected = top_indices(
            [sim_score(obj, sim, now) for obj, sim in zip(corpus, similarities, strict=True)],
            injected_per_session,
        )

        counts = {"positive": 0, "negative": 0, "unused": 0, "ignored_penalties": 0}
        session_types: dict[int, list[str]] = {}
        helped = hurt = 0
        for j in injected:
            obj = corpus[j]
            tally = SessionTally()
            p_use = 0.6 if obj.topic == topic else 0.15
            emitted: list[str] = []
            if rng.random() < p_use:
                if rng.random() < obj.quality:
                    emitted.append(pick_weighted(rng, _POSITIVE_MIX))
                    if emitted[0] != CONFIRMED and rng.random() < 0.25:
                        emitted.append(CONFIRMED)  # the user also says "yes, right"
                    counts["positive"] += 1
                    helped += 1
                else:
                    emitted.append(pick_weighted(rng, _NEGATIVE_MIX))
                    counts["negative"] += 1
                    hurt += 1
            else:
                emitted.append(UNUSED)
                counts["unused"] += 1
            for signal_type in emitted:
                actor_id, actor_type = _ACTORS.get(
                    signal_type, ("response-analyzer", "SYSTEM_PROCESS")
                )
                outcome = apply_signal(
                    obj.state,
                    make_signal(
                        signal_type,
                        actor_id=actor_id,
                        actor_type=actor_type,
                        session_id=session_id,
                        ts=now,
                        evidence_ids=(f"ev-{session_id}-{obj.object_id}",),
                    ),
                    tally,
                )
                obj.state, tally = outcome.state, outcome.tally
            session_types[j] = emitted

        outcome_name = session_outcome(helped, hurt, rng)
        for j in injected:
            obj = corpus[j]
            used = is_used(session_types[j])
            obj.utility = utility_update(obj.utility, used, outcome_name)
            if used:
                obj.uses += 1
                obj.last_use_at = now
            if session_types[j] == [UNUSED]:
                obj.streak.append(classify_session([topic], None, [obj.topic], ""))
            else:
                obj.streak.clear()
            # SPEC §9: examined when the streak has gained a session, i.e. right now.
            if len(obj.streak) >= streak_threshold:
                decision = sweep_decision(
                    decay_profile=obj.state.decay_profile,
                    pinned=obj.state.pinned,
                    epistemic_type=obj.state.epistemic_type,
                    unused_streak=len(obj.streak),
                    classifications=obj.streak,
                    threshold=streak_threshold,
                )
                if decision.apply_penalty:
                    obj.state = apply_signal(
                        obj.state,
                        make_signal(
                            IGNORED_REPEATEDLY,
                            actor_id="ignored-sweep",
                            actor_type="SYSTEM_PROCESS",
                            session_id=session_id,
                            ts=now,
                        ),
                        SessionTally(),
                    ).state
                    obj.streak.clear()
                    counts["ignored_penalties"] += 1

        point = {
            "session": number,
            "topic": topic,
            "outcome": outcome_name,
            **counts,
            **confidence_distribution(
                [obj.state.confidence for obj in corpus], [obj.ceiling for obj in corpus]
            ),
        }
        series.append(point)
        report_progress(progress, number / sessions)

    passed, criterion = stability_verdict(series)
    return {
        "simulation": "stability",
        "seed": seed,
        "parameters": {
            "sessions": sessions,
            "corpus_size": corpus_size,
            "injected_per_session": injected_per_session,
            "streak_threshold": streak_threshold,
        },
        "passed": passed,
        "criterion": criterion,
        "final": {k: series[-1][k] for k in ("min", "p10", "p50", "p90", "max", "mean")}
        | {"spread": series[-1]["spread"], "extreme_share": series[-1]["extreme_share"]},
        "max_extreme_share": max(point["extreme_share"] for point in series),
        "series": series,
    }
