"""What the simulations share: the seed and simulated epoch, progress reporting, signals built
the way the live services build them, weighted draws, and the simulated object with its SPEC §14
ranking score.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from feedback.retrieval import DEFAULT_PROFILE, RankingInputs, rank_one
from feedback.utility import (
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_SUCCESS,
    UTILITY_START,
)
from rms.policy import (
    ASSERTED,
    CONDITIONAL,
    GLOBAL_CEILING,
    HYPOTHETICAL,
    INFERRED,
    OBSERVED,
    UNVERIFIED,
    ObjectState,
    Signal,
    ceiling_for,
    resolve_detection_method,
)

Progress = Callable[[float], None]

DEFAULT_SEED = 42
#: A fixed, timezone-aware origin: simulated time never depends on the wall clock.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: The epistemic types a simulated corpus draws from (every type but DEPRECATED).
CORPUS_TYPES = (OBSERVED, ASSERTED, INFERRED, HYPOTHETICAL, CONDITIONAL, UNVERIFIED)


def report_progress(progress: Progress | None, fraction: float) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)))


def make_signal(
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


def pick_weighted(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    """Weighted choice with one ``rng.random()`` draw (stable across Python versions)."""
    total = sum(w for _, w in weighted)
    x = rng.random() * total
    for value, weight in weighted:
        x -= weight
        if x < 0:
            return value
    return weighted[-1][0]


@dataclass
class SimObject:
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


def sim_score(obj: SimObject, similarity: float, now: datetime) -> float:
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


def top_indices(scores: Sequence[float], k: int) -> list[int]:
    # Ties break by corpus position so the ranking is deterministic.
    return sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:k]


def session_outcome(helped: int, hurt: int, rng: random.Random) -> str:
    if hurt and helped:
        return OUTCOME_PARTIAL
    if hurt:
        return OUTCOME_FAILED
    if helped:
        return OUTCOME_SUCCESS
    # Nothing in memory mattered: the interaction went however it went.
    return pick_weighted(
        rng, [(OUTCOME_SUCCESS, 0.5), (OUTCOME_PARTIAL, 0.3), (OUTCOME_FAILED, 0.2)]
    )
