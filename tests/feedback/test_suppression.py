"""``feedback.suppression`` (pure): its shortcut (only objects near the bar are scored as a
perfect match) finds exactly what scoring every object would, on random namespaces."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from feedback import suppression
from feedback.retrieval import Profile, RankingInputs, eligibility, rank_one

NOW = datetime(2026, 6, 1, tzinfo=UTC)
TYPES = ("OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED", "DEPRECATED")


def random_inputs(rng: random.Random) -> RankingInputs:
    created = NOW - timedelta(days=rng.uniform(0, 60))
    return RankingInputs(
        epistemic_type=rng.choice(TYPES),
        condition_state=None,
        confidence=rng.random(),
        salience_base=rng.random(),
        reinforcement_boost=rng.random() * 0.2,
        decay_profile=rng.choice(("SLOW", "MEDIUM", "FAST", "RAPID", "PERMANENT")),
        pinned=rng.random() < 0.1,
        last_reinforced_at=None,
        created_at=created,
        utility=rng.random(),
        uses=rng.randrange(5),
        last_use_at=created + timedelta(days=1) if rng.random() < 0.5 else None,
    )


def brute_force(rows, profile, salience_below, k):
    eligible = [(oid, i) for oid, i in rows if eligibility(i, profile)[0]]
    worst = {oid: rank_one(i, 0.0, NOW, profile).score for oid, i in eligible}
    out = {}
    for oid, i in eligible:
        best = rank_one(i, 1.0, NOW, profile)
        others = sorted((s for o, s in worst.items() if o != oid), reverse=True)
        kth = others[k - 1] if len(others) >= k else None
        reasons = []
        if best.salience_effective < salience_below:
            reasons.append("decayed")
        if kth is not None and best.score < kth:
            reasons.append("ranked_out")
        if reasons:
            out[oid] = (tuple(reasons), best.score, kth)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_shortcut_finds_what_scoring_everything_finds(seed):
    rng = random.Random(seed)
    rows = [(f"o{n:03d}", random_inputs(rng)) for n in range(rng.randrange(1, 60))]
    profile = Profile(
        similarity=rng.random(),
        hotness=rng.random(),
        utility=rng.random(),
        confidence=rng.random(),
        salience=rng.random(),
    )
    salience_below, k = rng.choice((0.0, 0.05, 0.3)), rng.randrange(1, 8)
    found = suppression.suppressed(rows, profile, NOW, salience_below=salience_below, k=k)
    got = {f.object_id: (f.reasons, f.best_score, f.kth_floor_score) for f in found}
    assert got == brute_force(rows, profile, salience_below, k)
