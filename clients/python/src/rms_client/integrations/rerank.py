"""Re-ranking hits through a score mirror: what the LangChain retriever and the LangGraph store
share, with no framework import.

A hit is ``(object_id or None, similarity or None)`` in the base retriever's order. Hits with an
object id the mirror knows are scored by ``mirror.rank`` (the namespace's retrieval profile, as
``/rank`` scores them); ineligible ones are dropped; the rest come in ``/rank``'s order (best
score first, ties by object id). Hits without an object id, or whose object the mirror does not
hold yet (a memory created after the mirror's feed position), pass through unranked after the
ranked ones, in the base order.

Similarity: the base's own relevance score when it gives one (clamped to [0, 1], the range
``/rank`` accepts); otherwise the rank-derived ``1 - i / n`` for the i-th of n hits (from 0),
which keeps the base order as the similarity order and spreads it over (0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


class Ranker(Protocol):
    """What the re-ranking needs of a mirror (``rms_client`` ``client.mirror(namespace)``)."""

    def rank(
        self, candidates: Sequence[tuple[str, float]], now: datetime | None = None
    ) -> list: ...  # pragma: no cover

    def get(self, object_id: str) -> dict | None: ...  # pragma: no cover


@dataclass(frozen=True)
class Placed:
    """One hit after re-ranking: its index in the base list, and its score (None: unranked)."""

    index: int
    object_id: str | None
    similarity: float | None
    score: float | None


def rank_derived_similarity(position: int, count: int) -> float:
    """``1 - position / count``: the first of ``count`` hits gets 1.0, the last ``1/count``."""
    return 1.0 - position / count if count else 0.0


def clamp_similarity(value: Any) -> float | None:
    """A finite float in [0, 1], or None when ``value`` is not a usable number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    if not math.isfinite(value):
        return None
    return min(1.0, max(0.0, value))


def rerank(
    hits: Sequence[tuple[str | None, float | None]],
    mirror: Ranker,
    *,
    now: datetime | None = None,
) -> list[Placed]:
    """Every hit worth keeping, re-ranked: eligible ranked ones best first, then the unranked.

    A repeated object id keeps its first (best-similarity) hit only: an object is offered once.
    """
    count = len(hits)
    known: list[tuple[int, str, float]] = []
    unranked: list[Placed] = []
    seen: set[str] = set()
    for i, (object_id, similarity) in enumerate(hits):
        sim = clamp_similarity(similarity)
        if sim is None:
            sim = rank_derived_similarity(i, count)
        if object_id:
            object_id = str(object_id)
            if object_id in seen:
                continue
            seen.add(object_id)
            if mirror.get(object_id) is not None:
                known.append((i, object_id, sim))
                continue
        unranked.append(Placed(i, object_id or None, sim, None))
    ranked: list[Placed] = []
    if known:
        results = mirror.rank([(oid, sim) for _, oid, sim in known], now=now)
        by_id = {str(r["object_id"]): r for r in results}
        for i, oid, sim in known:
            result = by_id.get(oid)
            if result is None:
                unranked.append(Placed(i, oid, sim, None))
            elif result.get("eligible", True):
                ranked.append(Placed(i, oid, sim, float(result["score"])))
        ranked.sort(key=lambda p: (-p.score, p.object_id))  # /rank's order, ties by id
        unranked.sort(key=lambda p: p.index)
    return ranked + unranked


def clock_value(clock: Callable[[], datetime] | None) -> datetime | None:
    return clock() if clock is not None else None
