"""Retrieval quality from injections and signals (``/retrieval-quality``, docs/METRICS.md).

Pure: no Django import. A selector counts a namespace's injections (over a window, for one
actor) by rank (:class:`RankRow`), its sessions, and the best used rank of each session with a
used injection; :func:`evaluate` turns them into the API's answer.

An injection is *used* when its feedback session has a signal on its object whose type the
policy counts as used (``rms.policy.USED_SIGNALS``: REFERENCED, CONFIRMED, TASK_COMPLETED_WITH;
the one definition of "used" that utility and hotness also read, SPEC §12).

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

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankRow:
    """Injections at one rank (None when the client sent none): how many and how many used,
    with the Σ token_cost of each."""

    rank: int | None
    injections: int
    used: int
    token_cost: int
    used_token_cost: int


def evaluate(ranks: Iterable[RankRow], sessions: int, hits: Iterable[int | None]) -> dict:
    """``{"sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank",
    "injections_by_rank"}`` from the rank rows, the number of sessions with injections, and for
    each session with a used injection the best (lowest) rank of one (None when none of its
    used injections has a rank). Per-rank maps are keyed by the rank as text, in rank order."""
    return evaluate_counts(ranks, sessions, Counter(hits))


def evaluate_counts(
    ranks: Iterable[RankRow], sessions: int, hits: Mapping[int | None, int]
) -> dict:
    """:func:`evaluate` with the hits counted: ``{best rank: sessions}``. The reciprocal ranks
    are summed rank by rank in rank order, so the same counts give the same float however they
    were gathered (live or from the retrieval rollup)."""
    n_hits = sum(hits.values())
    reciprocal = 0.0
    for best in sorted(rank for rank in hits if rank):
        reciprocal += hits[best] / best
    rows = sorted((row for row in ranks if row.rank is not None), key=lambda row: row.rank)
    return {
        "sessions": sessions,
        "hit_rate": n_hits / sessions if sessions else None,
        "mrr": reciprocal / sessions if sessions else None,
        "precision_at_rank": {str(r.rank): r.used / r.injections for r in rows},
        "wasted_tokens_by_rank": {str(r.rank): r.token_cost - r.used_token_cost for r in rows},
        "injections_by_rank": {str(r.rank): r.injections for r in rows},
    }


@dataclass(frozen=True, slots=True)
class DayRows:
    """:func:`evaluate_counts`'s arguments for the sessions of one day (``hits``: sessions with a
    used injection by their best used rank; ``hits`` and ``ranks`` are filled by the selector
    or read from the retrieval rollup)."""

    ranks: list[RankRow]
    sessions: int
    hits: Counter


def merge_days(days: Iterable[DayRows]) -> DayRows:
    """The rows of a window from the rows of its days: each session lies in exactly one day, so
    sessions and hits add up, and each rank's counts and token sums add up."""
    by_rank: dict[int | None, list[int]] = {}
    sessions = 0
    hits: Counter = Counter()
    for day in days:
        sessions += day.sessions
        hits.update(day.hits)
        for row in day.ranks:
            acc = by_rank.setdefault(row.rank, [0, 0, 0, 0])
            acc[0] += row.injections
            acc[1] += row.used
            acc[2] += row.token_cost
            acc[3] += row.used_token_cost
    ranks = [RankRow(rank, *acc) for rank, acc in by_rank.items()]
    return DayRows(ranks, sessions, hits)


def evaluate_daily(days: dict) -> dict:
    """``{day: evaluate(day's rows)}`` and the whole window's answer from the same rows:
    ``{"days": {...}, "window": evaluate(merge_days(...))}``."""
    return {
        "days": {day: evaluate_counts(*_args(rows)) for day, rows in days.items()},
        "window": evaluate_counts(*_args(merge_days(days.values()))),
    }


def _args(rows: DayRows) -> tuple:
    return rows.ranks, rows.sessions, rows.hits
