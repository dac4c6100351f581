"""Retrieval quality from injections and signals (``/retrieval-quality``, docs/METRICS.md).

Pure: no Django import. A selector turns a namespace's injections (over a window, for one actor)
into :class:`InjectionRow` values; :func:`evaluate` turns them into the API's answer.

An injection is *used* when its feedback session has a REFERENCED, CONFIRMED or
TASK_COMPLETED_WITH signal on its object (``feedback.utility.USED_SIGNALS``, the one definition
of "used" that utility and hotness also read, SPEC §12).

- precision at rank k: used injections at rank k / injections at rank k;
- MRR: mean over the sessions with injections of 1 / the rank of the best-ranked used injection
  (0 when none was used);
- hit rate: the share of those sessions with at least one used injection;
- wasted tokens at rank k: Σ token_cost of the injections at rank k that were not used.

A value with no data (no session) is ``None``, never 0, as for the four SPEC §10 metrics.
An injection without a ``rank_position`` counts for its session (hit rate, MRR's denominator)
but sits at no rank: it is in no per-rank figure and cannot be the first used one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InjectionRow:
    """One injection: its feedback session, rank (None when the client sent none), token cost,
    and whether the session used its object."""

    session: Hashable
    rank: int | None
    token_cost: int
    used: bool


def evaluate(rows: Iterable[InjectionRow]) -> dict:
    """``{"sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank",
    "injections_by_rank"}``; per-rank maps are keyed by the rank as text, in rank order."""
    #: session -> best rank of a used injection (0 when used but unranked, None when unused).
    best: dict[Hashable, int | None] = {}
    at_rank: dict[int, int] = {}
    used_at_rank: dict[int, int] = {}
    wasted: dict[int, int] = {}
    for row in rows:
        first = best.setdefault(row.session, None)
        if row.used and row.rank is not None and (not first or row.rank < first):
            best[row.session] = row.rank
        elif row.used and first is None:
            best[row.session] = 0
        if row.rank is None:
            continue
        at_rank[row.rank] = at_rank.get(row.rank, 0) + 1
        if row.used:
            used_at_rank[row.rank] = used_at_rank.get(row.rank, 0) + 1
        else:
            wasted[row.rank] = wasted.get(row.rank, 0) + row.token_cost
    sessions = len(best)
    hits = sum(1 for rank in best.values() if rank is not None)
    reciprocal = sum(1.0 / rank for rank in best.values() if rank)
    ranks = sorted(at_rank)
    return {
        "sessions": sessions,
        "hit_rate": hits / sessions if sessions else None,
        "mrr": reciprocal / sessions if sessions else None,
        "precision_at_rank": {str(k): used_at_rank.get(k, 0) / at_rank[k] for k in ranks},
        "wasted_tokens_by_rank": {str(k): wasted.get(k, 0) for k in ranks},
        "injections_by_rank": {str(k): at_rank[k] for k in ranks},
    }
