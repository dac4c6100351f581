"""Reads of the overview page: namespace health (SPEC §10) with its two-part cache and side
connection, histograms, metric snapshots for trends and sparklines, and the alert history.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db import close_old_connections, connection, connections
from django.db.models import Max, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Trunc
from django.utils import timezone

from feedback import aggregate_sums, metrics, object_rollup
from feedback import selectors as feedback_selectors
from feedback.aggregate_sums import USAGE_BINS
from feedback.metrics import METRIC_NAMES
from feedback.models import (
    Alert,
    MetricSnapshot,
)
from feedback.snapshots import SNAPSHOT_WINDOW_HOURS
from rms import store
from rms.models import Namespace
from rms.policy import DEPRECATED

#: Live metrics and histograms are recomputed at most this often per (namespaces, window): at a
#: million injections the windowed sums take a few hundred milliseconds, and an operator who
#: reloads the overview does not need them fresher than this. The page says when they were taken.
METRICS_CACHE_SECONDS = 60
#: What ``dashboard.tasks.warm_overview`` computes ahead lives this long: longer than its beat
#: interval, so a watched overview never meets an empty cache.
WARM_SECONDS = 150
#: Set by every overview request; the warming task runs only while someone is watching.
VIEWED_KEY = "dash:overview-viewed"
VIEWED_SECONDS = 15 * 60


def mark_overview_viewed() -> None:
    """Someone is watching the overview: keep its cache warm (dashboard.tasks) for a while."""
    cache.set(VIEWED_KEY, True, VIEWED_SECONDS)


#: Trend and alert-since history read from the snapshots, in buckets binned by the database.
SNAPSHOT_HISTORY = timedelta(days=30)
SPARKLINE_SPAN = timedelta(days=7)

WINDOWS: dict[str, timedelta | None] = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
DEFAULT_WINDOW = "24h"

CONFIDENCE_BINS = aggregate_sums.CONFIDENCE_BINS


# --- namespace health (SPEC §10) ----------------------------------------------------------------


@dataclass
class NamespaceHealth:
    namespace: Namespace
    evaluated: dict
    warnings: list[dict]
    objects: int = 0
    review_queue: int = 0

    @property
    def state(self) -> str:
        states = {m["state"] for m in self.evaluated.values()}
        if metrics.STATE_ALERT in states:
            return metrics.STATE_ALERT
        if states == {metrics.STATE_NO_DATA}:
            return metrics.STATE_NO_DATA
        return metrics.STATE_OK

    @property
    def alerts(self) -> list[str]:
        return [n for n, m in self.evaluated.items() if m["state"] == metrics.STATE_ALERT]


def _window(qs, since: datetime | None):
    return qs if since is None else qs.filter(ts__gte=since)


@dataclass
class ObjectStats:
    """What the overview needs from the objects and their aggregates, per namespace: the
    usage-ratio sum and count of SPEC §10, the review queue size, the object count and the two
    histograms. Independent of the time window."""

    usage_ratio_sum: float = 0.0
    usage_ratio_count: int = 0
    review_queue: int = 0
    objects: int = 0
    usage: list[int] = field(default_factory=lambda: [0] * USAGE_BINS)
    confidence: dict[str, list[int]] = field(default_factory=dict)


def object_stats(namespace_ids: list[int], *, live: bool = False) -> dict[int, ObjectStats]:
    """Per namespace, from the aggregates: the usage bins of the active objects with ≥ 1
    injection (Σ usage ratio, count, review-queue count; SPEC §8, §10); and from the objects, by
    (namespace, type, confidence bin): the object count (DEPRECATED included) and the confidence
    histogram of the active ones. Both read from the rollup in one snapshot
    (``feedback.object_rollup.object_sums_by_namespace``; ``live``: the live scans it is pinned
    to).
    """
    out = {ns_id: ObjectStats() for ns_id in namespace_ids}
    if live:
        sums = object_rollup.aggregate_sums_live(namespace_ids, lifetime=False)
        counts = object_rollup.object_counts_live(namespace_ids)
    else:
        sums, counts = object_rollup.object_sums_by_namespace(namespace_ids)
    for ns_id, bins in sums.items():
        st = out[ns_id]
        usage = aggregate_sums.usage_totals(bins)
        st.usage_ratio_sum, st.usage_ratio_count, st.review_queue = (
            usage.usage_sum,
            usage.objects,
            usage.queue,
        )
        for b in range(USAGE_BINS):
            st.usage[b] = bins[b].objects if b in bins else 0
    for (ns_id, kind, b), n in sorted(counts.items()):
        st = out[ns_id]
        st.objects += n
        if kind != DEPRECATED:
            st.confidence.setdefault(kind, [0] * CONFIDENCE_BINS)[b] += n
    return out


def window_stats(namespace_ids: list[int], since: datetime | None) -> dict[int, dict]:
    """The windowed sums of SPEC §10 per namespace: sessions (count, corrected, Σ budget) and
    injections (count, unused, wasted token cost), the whole hours from the hourly rollup
    (``feedback.selectors.window_sums``; all-time injection sums come from the aggregates)."""
    sessions, injections = feedback_selectors.window_sums(namespace_ids, since)
    return {
        ns_id: {"s": sessions.get(ns_id, {}), "i": injections.get(ns_id, {})}
        for ns_id in namespace_ids
    }


def metric_inputs_of(stats: ObjectStats, window: dict) -> metrics.MetricInputs:
    return feedback_selectors.inputs_from(
        stats.usage_ratio_sum, stats.usage_ratio_count, window["s"], window["i"]
    )


def metric_inputs_by_namespace(
    namespace_ids: list[int], since: datetime | None
) -> dict[int, metrics.MetricInputs]:
    """``feedback.selectors.metric_inputs`` for many namespaces at once (a test pins the
    equality): the same few queries whatever the number of namespaces."""
    stats = object_stats(namespace_ids)
    windows = window_stats(namespace_ids, since)
    return {ns_id: metric_inputs_of(stats[ns_id], windows[ns_id]) for ns_id in namespace_ids}


def _cache_key(*parts) -> str:
    raw = ":".join(str(p) for p in parts)
    return "dash:" + hashlib.sha1(raw.encode(), usedforsecurity=False).hexdigest()


def _cached(key: str, compute, refresh: bool):
    """``compute()`` through the cache: METRICS_CACHE_SECONDS on a request, WARM_SECONDS when
    ``dashboard.tasks.warm_overview`` recomputes ahead (``refresh``)."""
    value = None if refresh else cache.get(key)
    if value is None:
        value = (timezone.now(), compute())
        cache.set(key, value, WARM_SECONDS if refresh else METRICS_CACHE_SECONDS)
    return value


def _objects_key(ids: list[int]) -> str:
    return _cache_key("objects", ",".join(map(str, ids)))


def _cached_object_stats(ids: list[int], refresh: bool = False):
    return _cached(_objects_key(ids), lambda: object_stats(ids), refresh)


#: A second database connection for the window-independent object statistics (see
#: _both_computed): one thread per process, which keeps its connection between requests like
#: any other (CONN_MAX_AGE); concurrent first renders queue on it, and then hit the cache.
_side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overview-stats")
#: A third connection for a card of the page computed while the page's other reads run
#: (``started``): the retrieval card's live tail. Same lifetime rules as ``_side``.
_side_card = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overview-card")


def close_side_connection() -> None:
    """Close the side threads' database connections (tests, before the test database goes)."""
    for executor in (_side, _side_card):
        executor.submit(connections.close_all).result()


def started(fn, *args) -> Callable[[], object]:
    """``fn(*args)`` started now on the card connection when a second connection sees the same
    data (``_overlap_possible``), else computed when asked: returns the function that gives its
    answer. A first render then waits for the slowest of its reads rather than their sum."""
    if not _overlap_possible():
        return lambda: fn(*args)
    return _side_card.submit(_on_side_connection, fn, *args).result


def _on_side_connection(fn, *args):
    close_old_connections()  # as at the start of a request: drop an expired or broken one
    return fn(*args)


def _overlap_possible() -> bool:
    """Two connections see the same data only outside a transaction (a test's or a caller's
    uncommitted rows would be invisible to the second one), and SQLite has one writer anyway."""
    return store.get().parallel_connections and not connection.in_atomic_block


def _both_computed(ids: list[int], compute_window) -> tuple[tuple, tuple]:
    """Object statistics and window sums when neither is cached: the object statistics run on a
    second connection while this one scans the window, so a first render waits for the slower
    of the two instead of their sum (≈ 20 ms at 100k objects). Both go to the cache."""
    future = _side.submit(_on_side_connection, object_stats, ids)
    window = (timezone.now(), compute_window())
    stats = (timezone.now(), future.result())
    cache.set(_objects_key(ids), stats, METRICS_CACHE_SECONDS)
    return stats, window


def namespace_health(
    namespaces: list[Namespace], window: str, *, refresh: bool = False
) -> tuple[list, datetime]:
    """The four metrics of every namespace over ``window``, with object and queue counts.

    The same few queries whatever the number of namespaces, cached in two parts (the object
    statistics do not depend on the window, so switching windows reuses them); ``refresh``
    recomputes the window part. Returns (health list, when the older part was computed).
    """
    ids = [ns.pk for ns in namespaces]
    span = WINDOWS[window]
    window_key = _cache_key("window", window, ",".join(map(str, ids)))

    def compute_window():
        return window_stats(ids, None if span is None else timezone.now() - span)

    stats_entry = cache.get(_objects_key(ids))
    if stats_entry is None and not refresh and _overlap_possible() and not cache.get(window_key):
        stats_entry, window_entry = _both_computed(ids, compute_window)
        cache.set(window_key, window_entry, METRICS_CACHE_SECONDS)
    else:
        stats_entry = stats_entry or _cached_object_stats(ids)
        window_entry = _cached(window_key, compute_window, refresh)
    (stats_at, stats), (window_at, windows) = stats_entry, window_entry
    out = []
    for ns in namespaces:
        inputs = metric_inputs_of(stats[ns.pk], windows[ns.pk])
        try:
            evaluated = metrics.evaluate(inputs, ns.alert_thresholds)
        except ValueError:  # a broken threshold setting must not take the overview down
            evaluated = metrics.evaluate(inputs)
        out.append(
            NamespaceHealth(
                namespace=ns,
                evaluated=evaluated,
                warnings=metrics.warnings(evaluated),
                objects=stats[ns.pk].objects,
                review_queue=stats[ns.pk].review_queue,
            )
        )
    return out, min(stats_at, window_at)


def refresh_object_stats(namespaces: list[Namespace]) -> None:
    _cached_object_stats([ns.pk for ns in namespaces], refresh=True)


def histograms(namespaces: list[Namespace], namespace: Namespace) -> dict:
    """Usage-ratio and confidence histograms of ``namespace``'s active objects, from the object
    statistics of the visible ``namespaces`` (computed, and cached, with their health)."""
    _, stats = _cached_object_stats([ns.pk for ns in namespaces])
    st = stats[namespace.pk]
    return {"usage": st.usage, "confidence": st.confidence}


# --- metric snapshots (trends, sparklines, "in alert since") -------------------------------------


@dataclass
class SnapshotSeries:
    """Per metric: bucket starts, the value of the bucket's last snapshot, and whether that
    snapshot was in alert."""

    buckets: list[datetime] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    alert: dict[str, list[bool]] = field(default_factory=dict)
    bucket: str = "hour"

    @property
    def empty(self) -> bool:
        return not self.buckets

    def since(self, start: datetime) -> SnapshotSeries:
        keep = [i for i, b in enumerate(self.buckets) if b >= start]
        return SnapshotSeries(
            [self.buckets[i] for i in keep],
            {n: [v[i] for i in keep] for n, v in self.values.items()},
            {n: [v[i] for i in keep] for n, v in self.alert.items()},
            self.bucket,
        )

    def alert_since(self, name: str) -> tuple[datetime | None, bool]:
        """Start of the run of alert buckets that ends at the newest bucket, and whether the run
        reaches back to the oldest bucket loaded (so it began even earlier)."""
        flags = self.alert.get(name) or []
        if not flags or not flags[-1]:
            return None, False
        i = len(flags) - 1
        while i > 0 and flags[i - 1]:
            i -= 1
        return self.buckets[i], i == 0


def snapshot_series(
    namespace: Namespace, since: datetime | None, bucket: str = "hour"
) -> SnapshotSeries:
    """The namespace's 24 h metric snapshots since ``since``, one per ``bucket``: the last
    snapshot of each bucket, picked in SQL over the ``snap_ns_ts`` index, with only the value and
    state of each metric read out of its JSON (at most 720 rows for 30 days of hourly buckets,
    whatever the beat interval). One query, cached like the metrics: snapshots come hourly."""
    key = _cache_key(
        "snap", namespace.pk, bucket, since.replace(second=0, microsecond=0) if since else ""
    )
    cached = cache.get(key)
    if cached is not None:
        return cached
    qs = MetricSnapshot.objects.filter(namespace=namespace, window_hours=SNAPSHOT_WINDOW_HOURS)
    if since is not None:
        qs = qs.filter(ts__gte=since)
    last_of_bucket = (
        qs.annotate(b=Trunc("ts", bucket)).values("b").annotate(last=Max("pk")).values("last")
    )
    fields = {}
    for n, name in enumerate(METRIC_NAMES):
        fields[f"v{n}"] = KT(f"metrics__{name}__value")
        fields[f"s{n}"] = KT(f"metrics__{name}__state")
    rows = (
        MetricSnapshot.objects.filter(pk__in=Subquery(last_of_bucket))
        .annotate(**fields)
        .order_by("ts")
        .values_list("ts", *fields)
    )
    series = SnapshotSeries(bucket=bucket)
    series.values = {n: [] for n in METRIC_NAMES}
    series.alert = {n: [] for n in METRIC_NAMES}
    truncate = _TRUNCATE[bucket]
    for row in rows:
        series.buckets.append(truncate(row[0]))
        for n, name in enumerate(METRIC_NAMES):
            value = row[1 + 2 * n]
            # A metric with no data is a JSON null, which key transforms return as SQL NULL or,
            # on some backends, as the text "null".
            series.values[name].append(None if value in (None, "null") else float(value))
            series.alert[name].append(row[2 + 2 * n] == metrics.STATE_ALERT)
    cache.set(key, series, METRICS_CACHE_SECONDS)
    return series


_TRUNCATE = {
    "hour": lambda ts: ts.astimezone(UTC).replace(minute=0, second=0, microsecond=0),
    "day": lambda ts: ts.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0),
}


def alert_history(namespace, limit: int = 8) -> list:
    return list(feedback_selectors.alerts(namespace=namespace)[:limit])


def open_alerts(namespace) -> dict[str, Alert]:
    """The namespace's open alert of each metric (at most one each: the snapshot opens one only
    when none is open)."""
    return {
        a.metric: a
        for a in feedback_selectors.alerts(namespace=namespace, state=Alert.OPEN).reverse()
    }
