"""Suppressed memories: objects eligible to be offered that effectively cannot surface.

Pure (no Django): ranking inputs in, findings out, through the retrieval profile's own
functions (``feedback.retrieval.rank_one`` and ``eligibility``, which call ``rms.policy``'s
``salience_effective``), so no rule is written twice.

Two rules, each reported with its numbers:

- ``decayed``: effective salience (SPEC §1, decayed at the clock ``now``) below
  ``salience_below``. Pinned and PERMANENT objects never decay, so never match.
- ``ranked_out``: even as a perfect match (similarity 1) the object's profile score is below
  the ``k``-th best score of the namespace's other eligible objects as complete mismatches
  (similarity 0). Then no query can put it in the top ``k`` of a ranking of the namespace:
  hotness, utility, confidence and salience alone keep ``k`` others ahead of it. Needs more than
  ``k`` eligible objects; with fewer nothing is ranked out.

Ineligible objects (deprecated, condition not met, below the confidence floor) are not listed:
``/rank`` already says why they are held back.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from feedback.retrieval import Profile, RankingInputs, eligibility, rank_one

DECAYED = "decayed"
RANKED_OUT = "ranked_out"
#: Default bar of ``decayed``: below it an object adds under a twentieth of a fresh one's
#: salience weight to a score.
DEFAULT_SALIENCE_BELOW = 0.05
#: Default ``k`` of ``ranked_out``: the five that precision@5 and the simulations judge.
DEFAULT_K = 5


@dataclass(frozen=True)
class Finding:
    object_id: str
    reasons: tuple[str, ...]
    salience_effective: float
    #: Its score at similarity 1 (the best any query can give it).
    best_score: float
    #: The k-th best score of the others at similarity 0 (None with k or fewer others).
    kth_floor_score: float | None


def suppressed(
    rows: Iterable[tuple[str, RankingInputs]],
    profile: Profile,
    now: datetime,
    *,
    salience_below: float = DEFAULT_SALIENCE_BELOW,
    k: int = DEFAULT_K,
) -> list[Finding]:
    """The suppressed objects among ``rows`` (object id, inputs), in the order given."""
    eligible = []
    for object_id, inputs in rows:
        if eligibility(inputs, profile)[0]:
            worst = rank_one(inputs, 0.0, now, profile)
            eligible.append((object_id, inputs, worst))
    # The k+1 best mismatch scores: the k-th best among the others is the k-th of these, or
    # the (k+1)-th when the object itself is among the k best.
    top = heapq.nlargest(k + 1, ((worst.score, oid) for oid, _, worst in eligible))
    out = []
    for object_id, inputs, worst in eligible:
        others = [score for score, oid in top if oid != object_id][:k]
        kth = others[k - 1] if len(others) == k else None
        decayed = worst.salience_effective < salience_below
        # The score is linear in similarity, so only an object within the similarity weight
        # (and a rounding margin) of the bar can be ranked out; rank_one decides for those.
        near = kth is not None and worst.score + profile.similarity < kth + 1e-9
        if not (decayed or near):
            continue
        best = rank_one(inputs, 1.0, now, profile)
        reasons = []
        if decayed:
            reasons.append(DECAYED)
        if kth is not None and best.score < kth:
            reasons.append(RANKED_OUT)
        if reasons:
            out.append(Finding(object_id, tuple(reasons), best.salience_effective, best.score, kth))
    return out
