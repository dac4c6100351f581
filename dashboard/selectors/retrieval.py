"""Reads of the retrieval-quality page and the overview's retrieval card: per-day retrieval
quality (docs/METRICS.md) over the last days.

The finished days and hours are read from the retrieval rollup and only the hour running (and
what arrived since its last run) is computed live, by four grouped queries over the
(namespace, ts) index (``feedback.retrieval_rollup``);
evaluated by the pure function the API answers with, and cached like the overview's metrics;
``dashboard.tasks.warm_overview`` computes the overview's card ahead while the overview is
watched, so its requests do not rescan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.core.cache import cache

from dashboard.selectors.overview import METRICS_CACHE_SECONDS, WARM_SECONDS, _cache_key
from feedback import metrics, retrieval_quality
from feedback.retrieval_rollup import retrieval_days

#: The windows the page offers, in days; the overview's card shows the first.
WINDOW_DAYS = (7, 14, 30, 90)
DEFAULT_DAYS = 14
OVERVIEW_DAYS = 7
#: The ranks drawn as their own line; deeper ranks are in the table.
CHART_RANKS = 5


@dataclass
class RetrievalTrend:
    """Per-day answers (every day of the window, None for a day without sessions), the whole
    window's answer, and the namespace's retrieval alert states over that window."""

    days: list[date]
    by_day: dict[date, dict | None]
    window: dict
    alerts: dict
    since: datetime
    until: datetime

    @property
    def empty(self) -> bool:
        return not self.window["sessions"]

    def ranks(self) -> list[int]:
        return sorted(int(k) for k in self.window["injections_by_rank"])


def day_bounds(days: int, now: datetime) -> tuple[datetime, datetime, list[date]]:
    """The window of the last ``days`` UTC days up to ``now`` (today included)."""
    today = now.astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    since = datetime.combine(first, time.min, tzinfo=UTC)
    return since, now, [first + timedelta(days=k) for k in range(days)]


def retrieval_trend(
    namespace, days: int, now: datetime, actor_id: str | None = None, refresh: bool = False
) -> RetrievalTrend:
    """The namespace's per-day retrieval quality over the last ``days`` days, cached for
    METRICS_CACHE_SECONDS (WARM_SECONDS when ``refresh``: the warming task computes ahead)."""
    key = _cache_key("retrieval", namespace.pk, days, actor_id or "", now.date().isoformat())
    cached = None if refresh else cache.get(key)
    if cached is not None:
        return cached
    since, until, day_list = day_bounds(days, now)
    rows = retrieval_days(namespace, since, until, actor_id)
    answer = retrieval_quality.evaluate_daily(rows)
    trend = RetrievalTrend(
        days=day_list,
        by_day={d: answer["days"].get(d) for d in day_list},
        window=answer["window"],
        alerts=metrics.evaluate_retrieval(answer["window"], namespace.alert_thresholds),
        since=since,
        until=until,
    )
    cache.set(key, trend, WARM_SECONDS if refresh else METRICS_CACHE_SECONDS)
    return trend
