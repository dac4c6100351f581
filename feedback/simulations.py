"""Seeded, reproducible simulations of the feedback loop (SPEC §14, RFC-0008 §11, RFC-0009 §13).

Pure: no Django import, no database, no clock and no global random state. Every simulation builds
its own in-memory corpus, draws every random number from one ``random.Random(seed)``, moves
confidence only through ``rms.policy`` (the same functions the live services and replay call) and
ranks only through ``feedback.utility``, so a result is a function of its arguments alone and the
same seed gives an identical, JSON-serialisable result dict.

The RFC-0008 §11 benchmark suite's exact checks are here; its replay of 100 objects needs the
stored log, so ``feedback.suite`` runs them together with that check on the database.

Each simulation accepts ``progress(fraction)``, called with a non-decreasing fraction in (0, 1]
that ends at 1.0, so a worker can report how far it got.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from feedback.relevance import classify_session, sweep_decision
from feedback.retrieval import DEFAULT_PROFILE, RankingInputs, rank_one
from feedback.utility import (
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_SUCCESS,
    UTILITY_START,
    is_used,
    utility_update,
)
from rms.policy import (
    ASSERTED,
    CONDITIONAL,
    CORRECTED_FLOOR,
    GLOBAL_CEILING,
    HYPOTHETICAL,
    INFERRED,
    OBSERVED,
    SESSION_CAP,
    SIGNALS,
    UNVERIFIED,
    ObjectState,
    SessionTally,
    Signal,
    apply_signal,
    ceiling_for,
    initial_state,
    resolve_detection_method,
)

Progress = Callable[[float], None]

DEFAULT_SEED = 42
#: A fixed, timezone-aware origin: simulated time never depends on the wall clock.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

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


def _report(progress: Progress | None, fraction: float) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)))


def _signal(
    signal_type: str,
    *,
    actor_id: str,
    actor_type: str,
    session_id: str,
    ts: datetime,
    detection_method: str | None = None,
    evidence_ids: Sequence[str] = (),
) -> Signal:
    return Signal(
        signal_type=signal_type,
        detection_method=resolve_detection_method(signal_type, detection_method),
        actor_id=actor_id,
        actor_type=actor_type,
        session_id=session_id,
        ts=ts,
        evidence_ids=tuple(evidence_ids),
    )


def _pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    """Weighted choice with one ``rng.random()`` draw (stable across Python versions)."""
    total = sum(w for _, w in weighted)
    x = rng.random() * total
    for value, weight in weighted:
        x -= weight
        if x < 0:
            return value
    return weighted[-1][0]


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


@dataclass
class _SimObject:
    """A simulated memory object; internal and mutable, its ``state`` moves only via the policy."""

    object_id: str
    state: ObjectState
    created_at: datetime
    topic: str = ""
    base_similarity: float = 0.0
    label: str = ""
    quality: float = 0.5
    utility: float = UTILITY_START
    uses: int = 0
    last_use_at: datetime | None = None
    streak: list[str] = field(default_factory=list)

    @property
    def ceiling(self) -> float:
        ceiling = ceiling_for(self.state.epistemic_type)
        return GLOBAL_CEILING if ceiling is None else ceiling


def _score(obj: _SimObject, similarity: float, now: datetime) -> float:
    """The score ``/rank`` gives with the default retrieval profile (SPEC §12, one pure
    function); an ineligible object ranks after every eligible one, as ``/rank`` orders them."""
    state = obj.state
    inputs = RankingInputs(
        epistemic_type=state.epistemic_type,
        condition_state=state.condition_state,
        confidence=state.confidence,
        salience_base=state.salience_base,
        reinforcement_boost=state.reinforcement_boost,
        decay_profile=state.decay_profile,
        pinned=state.pinned,
        last_reinforced_at=state.last_reinforced_at,
        created_at=obj.created_at,
        utility=obj.utility,
        uses=obj.uses,
        last_use_at=obj.last_use_at,
    )
    ranked = rank_one(inputs, similarity, now, DEFAULT_PROFILE)
    return ranked.score if ranked.eligible else -math.inf


def _top(scores: Sequence[float], k: int) -> list[int]:
    # Ties break by corpus position so the ranking is deterministic.
    return sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:k]


def _session_outcome(helped: int, hurt: int, rng: random.Random) -> str:
    if hurt and helped:
        return OUTCOME_PARTIAL
    if hurt:
        return OUTCOME_FAILED
    if helped:
        return OUTCOME_SUCCESS
    # Nothing in memory mattered: the interaction went however it went.
    return _pick(rng, [(OUTCOME_SUCCESS, 0.5), (OUTCOME_PARTIAL, 0.3), (OUTCOME_FAILED, 0.2)])


# --- stability ------------------------------------------------------------------------------------

_STABILITY_TYPES = (OBSERVED, ASSERTED, INFERRED, HYPOTHETICAL, CONDITIONAL, UNVERIFIED)
_TOPICS = ("billing", "deploys", "oncall", "customers", "security", "roadmap")
#: Given that the model used an object, which signal reports it (plausible detector mix).
_POSITIVE_MIX = (
    ("REFERENCED", 0.50),
    ("TASK_COMPLETED_WITH", 0.25),
    ("CONFIRMED", 0.20),
    ("CORROBORATED_BY_EXTERNAL", 0.05),
)
_NEGATIVE_MIX = (
    ("TASK_FAILED_WITH", 0.45),
    ("CORRECTED", 0.35),
    ("CONTRADICTED_BY_OBSERVATION", 0.20),
)
#: Who sends each signal type: (actor_id, actor_type).
_ACTORS = {
    "REFERENCED": ("response-analyzer", "SYSTEM_PROCESS"),
    "TASK_COMPLETED_WITH": ("tool-runner", "SYSTEM_PROCESS"),
    "CONFIRMED": ("user-1", "HUMAN_USER"),
    "CORROBORATED_BY_EXTERNAL": ("crosscheck", "EXTERNAL_CONNECTOR"),
    "TASK_FAILED_WITH": ("tool-runner", "SYSTEM_PROCESS"),
    "CORRECTED": ("user-1", "HUMAN_USER"),
    "CONTRADICTED_BY_OBSERVATION": ("observer", "SYSTEM_PROCESS"),
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

    corpus: list[_SimObject] = []
    for j in range(corpus_size):
        epistemic_type = _STABILITY_TYPES[j % len(_STABILITY_TYPES)]
        condition = None
        if epistemic_type == CONDITIONAL:
            condition = "TRUE" if rng.random() < 2 / 3 else "UNKNOWN"
        corpus.append(
            _SimObject(
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
        injected = _top(
            [_score(obj, sim, now) for obj, sim in zip(corpus, similarities, strict=True)],
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
                    emitted.append(_pick(rng, _POSITIVE_MIX))
                    if emitted[0] != "CONFIRMED" and rng.random() < 0.25:
                        emitted.append("CONFIRMED")  # the user also says "yes, right"
                    counts["positive"] += 1
                    helped += 1
                else:
                    emitted.append(_pick(rng, _NEGATIVE_MIX))
                    counts["negative"] += 1
                    hurt += 1
            else:
                emitted.append("UNUSED")
                counts["unused"] += 1
            for signal_type in emitted:
                actor_id, actor_type = _ACTORS.get(
                    signal_type, ("response-analyzer", "SYSTEM_PROCESS")
                )
                outcome = apply_signal(
                    obj.state,
                    _signal(
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

        outcome_name = _session_outcome(helped, hurt, rng)
        for j in injected:
            obj = corpus[j]
            used = is_used(session_types[j])
            obj.utility = utility_update(obj.utility, used, outcome_name)
            if used:
                obj.uses += 1
                obj.last_use_at = now
            if session_types[j] == ["UNUSED"]:
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
                        _signal(
                            "IGNORED_REPEATEDLY",
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
        _report(progress, number / sessions)

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


# --- precision@5 ----------------------------------------------------------------------------------

RELEVANT = "relevant"
WRONG = "wrong"
FILLER = "filler"
TOP_K = 5


def precision_simulation(
    seed: int = DEFAULT_SEED,
    *,
    sessions: int = 50,
    relevant: int = 8,
    wrong: int = 4,
    filler: int = 28,
    confirm_probability: float = 0.85,
    correct_probability: float = 0.9,
    progress: Progress | None = None,
) -> dict:
    """RFC-0009 §13 precision@5 at session 1 vs session 50 for one user (SPEC §14).

    The corpus is held constant; only feedback moves scores. Known-wrong objects look like the
    user's questions (similarity 0.85–0.95) and were extracted as OBSERVED at 0.90 — the
    systematic-extraction case — so at session 1 they outrank every relevant object (similarity
    0.50–0.70, mixed types) and sit in the top 5. Filler is unrelated (similarity 0.05–0.40).
    Each daily session ranks by the §12 score × confidence with ±0.03 query noise; the user
    CONFIRMs each relevant object in the top 5 with ``confirm_probability``, CORRECTs each wrong
    one with ``correct_probability``, and ignores the rest (UNUSED). p@5 of a session is the
    share of relevant objects in the top 5 it was shown, before its own feedback.
    """
    if sessions < 1:
        raise ValueError("sessions must be at least 1.")
    if min(relevant, wrong, filler) < 0 or relevant + wrong + filler < TOP_K:
        raise ValueError(f"The corpus needs at least {TOP_K} objects and no negative counts.")
    rng = random.Random(seed)

    corpus: list[_SimObject] = []
    for j in range(relevant):
        epistemic_type = rng.choice((OBSERVED, ASSERTED, INFERRED))
        corpus.append(
            _SimObject(
                object_id=f"relevant-{j:02d}",
                state=initial_state(epistemic_type=epistemic_type),
                created_at=EPOCH,
                base_similarity=0.50 + 0.20 * rng.random(),
                label=RELEVANT,
            )
        )
    for j in range(wrong):
        corpus.append(
            _SimObject(
                object_id=f"wrong-{j:02d}",
                state=initial_state(epistemic_type=OBSERVED),
                created_at=EPOCH,
                base_similarity=0.85 + 0.10 * rng.random(),
                label=WRONG,
            )
        )
    for j in range(filler):
        corpus.append(
            _SimObject(
                object_id=f"filler-{j:02d}",
                state=initial_state(epistemic_type=rng.choice(_STABILITY_TYPES[:4])),
                created_at=EPOCH,
                base_similarity=0.05 + 0.35 * rng.random(),
                label=FILLER,
            )
        )

    def mean_of(label: str, attr: str) -> float | None:
        values = [
            obj.state.confidence if attr == "confidence" else obj.utility
            for obj in corpus
            if obj.label == label
        ]
        return math.fsum(values) / len(values) if values else None

    series: list[dict] = []
    for i in range(sessions):
        number = i + 1
        now = EPOCH + timedelta(days=number)
        session_id = f"precision-{number}"
        similarities = [
            min(1.0, max(0.0, obj.base_similarity + 0.06 * (rng.random() - 0.5))) for obj in corpus
        ]
        top = _top(
            [_score(obj, sim, now) for obj, sim in zip(corpus, similarities, strict=True)], TOP_K
        )
        labels = [corpus[j].label for j in top]
        precision = labels.count(RELEVANT) / TOP_K

        emitted: dict[int, str] = {}
        for j in top:
            obj = corpus[j]
            signal_type = "UNUSED"
            if obj.label == RELEVANT and rng.random() < confirm_probability:
                signal_type = "CONFIRMED"
            elif obj.label == WRONG and rng.random() < correct_probability:
                signal_type = "CORRECTED"
            obj.state = apply_signal(
                obj.state,
                _signal(
                    signal_type,
                    actor_id="user-1",
                    actor_type="HUMAN_USER",
                    session_id=session_id,
                    ts=now,
                    detection_method="explicit_user",
                ),
                SessionTally(),
            ).state
            emitted[j] = signal_type
        helped = sum(1 for s in emitted.values() if s == "CONFIRMED")
        hurt = sum(1 for s in emitted.values() if s == "CORRECTED")
        outcome_name = _session_outcome(helped, hurt, rng)
        for j in top:
            obj = corpus[j]
            used = is_used([emitted[j]])
            obj.utility = utility_update(obj.utility, used, outcome_name)
            if used:
                obj.uses += 1
                obj.last_use_at = now

        series.append(
            {
                "session": number,
                "precision_at_5": precision,
                "relevant_in_top5": labels.count(RELEVANT),
                "wrong_in_top5": labels.count(WRONG),
                "filler_in_top5": labels.count(FILLER),
                "top5": [corpus[j].object_id for j in top],
                "outcome": outcome_name,
                "mean_confidence_relevant": mean_of(RELEVANT, "confidence"),
                "mean_confidence_wrong": mean_of(WRONG, "confidence"),
                "mean_utility_relevant": mean_of(RELEVANT, "utility"),
                "mean_utility_wrong": mean_of(WRONG, "utility"),
            }
        )
        _report(progress, number / sessions)

    p1 = series[0]["precision_at_5"]
    p50 = series[49]["precision_at_5"] if len(series) >= 50 else None
    return {
        "simulation": "precision_at_5",
        "seed": seed,
        "parameters": {
            "sessions": sessions,
            "relevant": relevant,
            "wrong": wrong,
            "filler": filler,
            "confirm_probability": confirm_probability,
            "correct_probability": correct_probability,
        },
        "precision_at_5_session_1": p1,
        "precision_at_5_session_50": p50,
        "precision_at_5_final": series[-1]["precision_at_5"],
        "wrong_in_top5_session_1": series[0]["wrong_in_top5"],
        "passed": p50 is not None and p50 > p1,
        "criterion": "precision@5 at session 50 exceeds precision@5 at session 1.",
        "series": series,
    }


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
                _signal(
                    "CONFIRMED",
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
        signal_type = ("CONFIRMED", "TASK_COMPLETED_WITH", "CORROBORATED_BY_EXTERNAL")[k % 3]
        outcome = apply_signal(
            state,
            _signal(
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
        _signal(
            "CONFIRMED",
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
    full = SIGNALS["CONFIRMED"].base_weight * 1.0
    discounted = full * 0.4

    def single(actor_type: str, evidence: tuple[str, ...]) -> float:
        return apply_signal(
            base,
            _signal(
                "CONFIRMED",
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
                    _signal(
                        "CONFIRMED",
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
            _signal(
                "CORRECTED",
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
        _report(progress, done / total)
    return checks


__all__ = [
    "DEFAULT_SEED",
    "EXACT_CHECKS",
    "check_result",
    "confidence_distribution",
    "exact_checks",
    "precision_simulation",
    "stability_simulation",
    "stability_verdict",
]
