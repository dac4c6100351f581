"""The precision@5 simulation (SPEC §14): does feedback lift precision@5 from session 1 to 50?"""

from __future__ import annotations

import math
import random
from datetime import timedelta

from feedback.simulations.common import (
    CORPUS_TYPES,
    DEFAULT_SEED,
    EPOCH,
    Progress,
    SimObject,
    make_signal,
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
    ASSERTED,
    CONFIRMED,
    CORRECTED,
    INFERRED,
    OBSERVED,
    UNUSED,
    SessionTally,
    apply_signal,
    initial_state,
)

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

    corpus: list[SimObject] = []
    for j in range(relevant):
        epistemic_type = rng.choice((OBSERVED, ASSERTED, INFERRED))
        corpus.append(
            SimObject(
                object_id=f"relevant-{j:02d}",
                state=initial_state(epistemic_type=epistemic_type),
                created_at=EPOCH,
                base_similarity=0.50 + 0.20 * rng.random(),
                label=RELEVANT,
            )
        )
    for j in range(wrong):
        corpus.append(
            SimObject(
                object_id=f"wrong-{j:02d}",
                state=initial_state(epistemic_type=OBSERVED),
                created_at=EPOCH,
                base_similarity=0.85 + 0.10 * rng.random(),
                label=WRONG,
            )
        )
    for j in range(filler):
        corpus.append(
            SimObject(
                object_id=f"filler-{j:02d}",
                state=initial_state(epistemic_type=rng.choice(CORPUS_TYPES[:4])),
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
        top = top_indices(
            [sim_score(obj, sim, now) for obj, sim in zip(corpus, similarities, strict=True)], TOP_K
        )
        labels = [corpus[j].label for j in top]
        precision = labels.count(RELEVANT) / TOP_K

        emitted: dict[int, str] = {}
        for j in top:
            obj = corpus[j]
            signal_type = UNUSED
            if obj.label == RELEVANT and rng.random() < confirm_probability:
                signal_type = CONFIRMED
            elif obj.label == WRONG and rng.random() < correct_probability:
                signal_type = CORRECTED
            obj.state = apply_signal(
                obj.state,
                make_signal(
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
        helped = sum(1 for s in emitted.values() if s == CONFIRMED)
        hurt = sum(1 for s in emitted.values() if s == CORRECTED)
        outcome_name = session_outcome(helped, hurt, rng)
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
        report_progress(progress, number / sessions)

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
