"""Dashboard-only reads. Every function here runs a fixed number of queries, whatever the number
of objects, sessions or namespaces (STYLE §10): lists are paginated in SQL, per-row figures come
from one grouped query per page, and histograms and trends are binned in SQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db import close_old_connections, connection, connections
from django.db.models import Count, F, Max, OuterRef, Prefetch, Q, Subquery, Sum, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Floor, Least, Trunc
from django.utils import timezone

from delivery.models import WebhookDelivery
from feedback import metrics
from feedback import selectors as feedback_selectors
from feedback.metrics import METRIC_NAMES
from feedback.models import (
    Alert,
    FeedbackAggregate,
    FeedbackSession,
    InjectionEvent,
    MetricSnapshot,
    SessionNamespace,
    SignalRecord,
    TaskRun,
)
from feedback.selectors import REVIEW_MIN_INJECTIONS, REVIEW_USAGE_BELOW, review_queue
from feedback.snapshots import SNAPSHOT_WINDOW_HOURS
from rms import changes, evidence, oplog, policy, store
from rms.edges import object_relationships
from rms.models import MemoryObject, Namespace, Operation, Relationship
from rms.policy import DEPRECATED
from rms.replay import state_from_snapshot

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

USAGE_BINS = 10
CONFIDENCE_BINS = 20


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


def _deprecated_ids(namespace_ids: list[int]):
    return MemoryObject.objects.filter(
        namespace_id__in=namespace_ids, epistemic_type=DEPRECATED
    ).values("pk")


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


def object_stats(namespace_ids: list[int]) -> dict[int, ObjectStats]:
    """Two scans for every namespace at once, each binned by the database:

    - active aggregates with ≥ 1 injection, by (namespace, usage bin): Σ usage ratio, count and
      review-queue count (SPEC §8, §10) — the bins sum to the namespace totals;
    - objects by (namespace, type, confidence bin): the object count (DEPRECATED included) and
      the confidence histogram of the active ones.

    The DEPRECATED exclusion is an ``IN (subquery)`` over the few deprecated ids rather than a
    join of every aggregate to its object.
    """
    out = {ns_id: ObjectStats() for ns_id in namespace_ids}
    rows = (
        FeedbackAggregate.objects.filter(namespace_id__in=namespace_ids, total_injections__gte=1)
        .exclude(object_id__in=Subquery(_deprecated_ids(namespace_ids)))
        .annotate(bin=Least(Floor(F("usage_ratio") * USAGE_BINS), Value(USAGE_BINS - 1.0)))
        .values("namespace_id", "bin")
        .annotate(
            total=Sum("usage_ratio"),
            n=Count("pk"),
            queue=Count(
                "pk",
                filter=Q(
                    usage_ratio__lt=REVIEW_USAGE_BELOW,
                    total_injections__gte=REVIEW_MIN_INJECTIONS,
                ),
            ),
        )
        .order_by("namespace_id", "bin")
    )
    for r in rows:
        st = out[r["namespace_id"]]
        st.usage_ratio_sum += r["total"] or 0.0
        st.usage_ratio_count += r["n"]
        st.review_queue += r["queue"]
        st.usage[max(0, int(r["bin"]))] += r["n"]
    rows = (
        MemoryObject.objects.filter(namespace_id__in=namespace_ids)
        .annotate(bin=Least(Floor(F("confidence") * CONFIDENCE_BINS), Value(CONFIDENCE_BINS - 1.0)))
        .values("namespace_id", "epistemic_type", "bin")
        .annotate(n=Count("*"))  # answered from the obj_ns_type covering index
        .order_by()
    )
    for r in rows:
        st = out[r["namespace_id"]]
        st.objects += r["n"]
        if r["epistemic_type"] != DEPRECATED:
            counts = st.confidence.setdefault(r["epistemic_type"], [0] * CONFIDENCE_BINS)
            counts[max(0, int(r["bin"]))] += r["n"]
    return out


def window_stats(namespace_ids: list[int], since: datetime | None) -> dict[int, dict]:
    """The windowed sums of SPEC §10 per namespace: sessions (count, corrected, Σ budget) and
    injections (count, unused, wasted token cost), one grouped query each
    (``feedback.selectors``; all-time injection sums come from the aggregates)."""
    sessions = feedback_selectors.session_sums(namespace_ids, since)
    injections = feedback_selectors.injection_sums(namespace_ids, since)
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
    equality): four grouped queries whatever the number of namespaces."""
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


def close_side_connection() -> None:
    """Close the side thread's database connection (tests, before the test database goes)."""
    _side.submit(connections.close_all).result()


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

    Four grouped queries whatever the number of namespaces, cached in two parts (the object
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


# --- calibration (SPEC §13) -------------------------------------------------------------------


def calibration(namespace: Namespace) -> list[dict]:
    """``rms.edges.calibration`` in two grouped queries: edges per extraction context, and
    evidence per (context, kind, provenance) over the ``op_ns_type_ts`` index; the counts are
    then handed to the same pure ``rms.evidence.calibration``, so the rows are identical
    without reading every evidence operation into Python."""
    edges = dict(
        Relationship.objects.filter(namespace=namespace)
        .values("extraction_context")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("extraction_context", "n")
    )
    context_of = Relationship.objects.filter(pk=OuterRef("target_id")).values("extraction_context")[
        :1
    ]
    grouped = (
        Operation.objects.filter(namespace=namespace.name, op_type="EDGE_EVIDENCE")
        .annotate(
            ctx=Subquery(context_of), kind=KT("payload__kind"), prov=KT("payload__provenance")
        )
        .values("ctx", "kind", "prov")
        .annotate(n=Count("pk"))
        .order_by()
    )
    observed: dict[str, list] = defaultdict(list)
    for row in grouped:
        if row["ctx"] is not None:
            observed[row["ctx"]].extend([(row["kind"], row["prov"])] * row["n"])
    records = []
    for context, n in edges.items():
        # One record carries the context's evidence, the others only count as edges.
        records.append(evidence.EdgeRecord(context, tuple(observed.pop(context, ()))))
        records.extend(evidence.EdgeRecord(context) for _ in range(n - 1))
    return [row.__dict__ for row in evidence.calibration(records)]


# --- review queue (SPEC §8) -------------------------------------------------------------------

REVIEW_SORTS = {
    "usage_ratio": "aggregate__usage_ratio",
    "injections": "aggregate__total_injections",
    "confidence": "confidence",
    "last_use": "aggregate__last_use_at",
    "tokens": "aggregate__total_token_cost",
}
REVIEW_DEFAULT_SORT = "usage_ratio"


def review_rows(
    namespace: Namespace, *, sort: str, descending: bool, epistemic_type: str | None = None
):
    """The SPEC §8 queue of one namespace, ordered by a column of the table."""
    qs = review_queue(namespace)
    if epistemic_type:
        qs = qs.filter(epistemic_type=epistemic_type)
    field_name = REVIEW_SORTS.get(sort, REVIEW_SORTS[REVIEW_DEFAULT_SORT])
    order = (
        F(field_name).desc(nulls_last=True) if descending else F(field_name).asc(nulls_first=True)
    )
    return qs.order_by(order, "pk")


# --- one object -------------------------------------------------------------------------------

#: Up to this many operations every one is a point of the trajectory; beyond it only the ones
#: that move confidence or salience are, so the chart stays light for a hot object.
TRAJECTORY_ALL_OPS = 400
TRAJECTORY_MAX_POINTS = 2000


def object_for_page(object_id) -> MemoryObject | None:
    return (
        MemoryObject.objects.select_related("namespace", "aggregate").filter(pk=object_id).first()
    )


def object_aggregate(obj: MemoryObject) -> FeedbackAggregate | None:
    try:
        return obj.aggregate
    except FeedbackAggregate.DoesNotExist:
        return None


@dataclass(frozen=True)
class TrajectoryPoint:
    seq: int
    ts: datetime
    op_type: str
    signal_type: str | None
    confidence: float
    salience_effective: float
    state: policy.ObjectState


def trajectory(obj: MemoryObject, until: datetime | None = None) -> list[TrajectoryPoint]:
    """Confidence and effective salience after each operation (the newest
    TRAJECTORY_MAX_POINTS), from the states stored beside the operations.

    Operations that only record facts (INJECTION_EVENT, FEEDBACK_EVENT, IGNORED_CHECK) may be
    stored without a state; they leave it unchanged, so they carry the last state before them.
    One query, plus one when the oldest operation shown has no state of its own.
    """
    qs = Operation.objects.filter(target_id=obj.pk)
    if obj.version > TRAJECTORY_ALL_OPS:
        qs = qs.filter(op_type__in=oplog.STATE_CHANGING)
    if until is not None:
        qs = qs.filter(ts__lte=until)
    # (ts, seq) is a chain's order and the index's, so the newest points are read from the
    # index's end instead of sorting the whole chain (rms.api.views.ObjectOperationsView)
    rows = list(
        qs.order_by("-ts", "-seq")
        .annotate(signal=KT("payload__signal_type"))
        .values_list("seq", "ts", "op_type", "signal", "state")[:TRAJECTORY_MAX_POINTS]
    )
    rows.reverse()
    current = None
    if rows and rows[0][4] is None:
        first_seq, first_ts = rows[0][0], rows[0][1]
        current = (
            Operation.objects.filter(target_id=obj.pk, ts__lte=first_ts, state__isnull=False)
            .exclude(ts=first_ts, seq__gte=first_seq)
            .order_by("-ts", "-seq")
            .values_list("state", flat=True)
            .first()
        )
    out = []
    parsed = None
    for seq, ts, op_type, signal, state in rows:
        if state is not None or parsed is None:
            current = state if state is not None else current
            if current is None:
                continue
            parsed = state_from_snapshot(current)
        out.append(
            TrajectoryPoint(
                seq=seq,
                ts=ts,
                op_type=op_type,
                signal_type=signal,
                confidence=parsed.confidence,
                salience_effective=policy.salience_effective(parsed, obj.created_at, ts),
                state=parsed,
            )
        )
    return out


def operations(obj: MemoryObject, *, op_type: str | None, descending: bool):
    qs = Operation.objects.filter(target_id=obj.pk)
    if op_type:
        qs = qs.filter(op_type=op_type)
    return qs.order_by(*(("-ts", "-seq") if descending else ("ts", "seq")))


def objects_by_id(ids) -> dict:
    """{id: object} with namespace, for links and labels (one query)."""
    if not ids:
        return {}
    return {
        o.pk: o
        for o in MemoryObject.objects.select_related("namespace")
        .filter(pk__in=list(ids))
        .only("id", "content", "epistemic_type", "confidence", "namespace__name")
    }


@dataclass(frozen=True)
class AsOf:
    """An object's state as of a time (SPEC §6): the operation that set it and its version."""

    op: Operation
    state: policy.ObjectState
    version: int


def object_as_of(obj: MemoryObject, at: datetime) -> AsOf | None:
    """The state after the last operation at or before ``at``; None before the object existed.
    Two indexed reads on (target, ts)."""
    op = oplog.state_as_of(obj.pk, at)
    if op is None:
        return None
    return AsOf(op, state_from_snapshot(op.state), oplog.version_as_of(obj.pk, at, op))


def relationships_of(obj: MemoryObject, now: datetime) -> list[dict]:
    """The object's relationships (``rms.edges``), each with ``outgoing`` and the ``other``
    end's object for its label (one query for all the other ends)."""
    relationships = object_relationships(obj, now)
    me = str(obj.pk)

    def other_id(r: dict) -> uuid.UUID:
        return uuid.UUID(r["target"] if r["source"] == me else r["source"])

    others = objects_by_id({other_id(r) for r in relationships})
    for r in relationships:
        r["outgoing"] = r["source"] == me
        r["other"] = others.get(other_id(r))
    return relationships


# --- feedback sessions (SPEC §7) -----------------------------------------------------------------

#: Sortable columns are those of the scope rows: sorting by a session column would join and sort
#: every session of the namespace for each page (about 200 ms at 100k sessions).
SESSION_SORTS = {
    "ts": "ts",
    "context_budget": "context_budget",
}


def session_rows(
    namespace: Namespace,
    *,
    sort: str,
    descending: bool,
    outcome: str | None = None,
    corrected: bool | None = None,
    session_id: str | None = None,
):
    """A namespace's feedback sessions (a session counts in each namespace of its scope).

    The page is cut from the scope rows alone (the ``sessns_ns_ts`` index) and its sessions are
    fetched afterwards: joining first would sort every session of the namespace for each page.
    """
    qs = SessionNamespace.objects.filter(namespace=namespace).prefetch_related(
        Prefetch(
            "session",
            queryset=FeedbackSession.objects.defer("record", "context_text", "body_hash"),
        )
    )
    if outcome == "none":
        qs = qs.filter(session__outcome__isnull=True)
    elif outcome:
        qs = qs.filter(session__outcome=outcome)
    if corrected is not None:
        qs = qs.filter(has_corrected=corrected)
    if session_id:
        qs = qs.filter(session__session_id=session_id)
    key = SESSION_SORTS.get(sort, "ts")
    return qs.order_by(f"-{key}" if descending else key, "-id" if descending else "id")


def session_page_counts(session_ids: list) -> tuple[dict, dict]:
    """Per session of one page: injections (n, Σ cost, unused) and signals (n, corrected,
    positive), two grouped queries."""
    if not session_ids:
        return {}, {}
    inj = {
        r["session_id"]: r
        for r in InjectionEvent.objects.filter(session_id__in=session_ids)
        .values("session_id")
        .annotate(
            n=Count("id"), cost=Sum("token_cost"), unused=Count("id", filter=Q(ended_unused=True))
        )
        .order_by()
    }
    sig = {
        r["feedback_session_id"]: r
        for r in SignalRecord.objects.filter(feedback_session_id__in=session_ids)
        .values("feedback_session_id")
        .annotate(
            n=Count("id"),
            corrected=Count("id", filter=Q(signal_type="CORRECTED")),
            automatic=Count("id", filter=Q(automatic=True)),
        )
        .order_by()
    }
    return inj, sig


@dataclass
class SessionChange:
    object_id: object
    op_type: str
    signal_type: str
    seq: int
    confidence_before: float
    confidence_after: float
    salience_before: float | None
    salience_after: float | None
    object: MemoryObject | None = None

    @property
    def delta(self) -> float:
        return (self.confidence_after or 0.0) - (self.confidence_before or 0.0)


def session_changes(session: FeedbackSession, signal_op_ids: set) -> list[SessionChange]:
    """The REINFORCE / PENALTY operations this session's signals caused, in one query.

    Every operation of a session carries the session's ts, so the candidates are the operations
    at that ts on the chains of the objects it touched (the ``op_target_ts`` index); a change
    operation belongs to this session exactly when it follows one of this session's
    FEEDBACK_EVENT operations on its chain (its prev_hash is that event's hash).
    """
    rows = list(
        Operation.objects.filter(
            target_id__in=Subquery(
                SignalRecord.objects.filter(feedback_session=session).values("object_id")
            ),
            ts=session.ts,
            op_type__in=("FEEDBACK_EVENT", "REINFORCE", "PENALTY"),
        )
        .order_by("seq")
        .values_list("seq", "id", "op_type", "target_id", "prev_hash", "hash", "payload")
    )
    event_hashes = {
        h for _, op_id, t, _, _, h, _ in rows if t == "FEEDBACK_EVENT" and op_id in signal_op_ids
    }
    out = []
    for seq, _, op_type, target, prev_hash, _, payload in rows:
        if op_type == "FEEDBACK_EVENT" or prev_hash not in event_hashes:
            continue
        out.append(
            SessionChange(
                object_id=target,
                op_type=op_type,
                signal_type=payload.get("signal_type", ""),
                seq=seq,
                confidence_before=payload.get("confidence_before"),
                confidence_after=payload.get("confidence_after"),
                salience_before=payload.get("salience_before"),
                salience_after=payload.get("salience_after"),
            )
        )
    return out


@dataclass
class SessionDetail:
    """A feedback session's page: its injections and signals in order, with the content of
    their objects, and the changes its signals caused (each with its object)."""

    injections: list[InjectionEvent]
    signals: list[SignalRecord]
    changes: list[SessionChange]


def session_detail(session: FeedbackSession) -> SessionDetail:
    """Three queries: injections, signals (each with its object's id and content), changes."""
    injections = list(
        InjectionEvent.objects.filter(session=session)
        .select_related("object")
        .only(
            "rank_position",
            "representation_type",
            "token_cost",
            "composite_score",
            "str_value",
            "ended_unused",
            "object__id",
            "object__content",
            "object__epistemic_type",
        )
        .order_by("rank_position", "id")
    )
    signals = list(
        SignalRecord.objects.filter(feedback_session=session)
        .select_related("object")
        .only(
            "signal_type",
            "detection_method",
            "reliability_class",
            "base_weight",
            "effective_weight",
            "effect",
            "reason",
            "actor_id",
            "actor_type",
            "automatic",
            "operation_id",
            "object__id",
            "object__content",
        )
        .order_by("id")
    )
    changes = session_changes(session, {s.operation_id for s in signals})
    contents = {i.object_id: i.object for i in injections} | {
        s.object_id: s.object for s in signals
    }
    for c in changes:
        c.object = contents.get(c.object_id)
    return SessionDetail(injections, signals, changes)


# --- tasks ---------------------------------------------------------------------------------------

#: Result fields shown in the runs table, read from the JSON in SQL so a list of stability runs
#: (each with a long per-session series) does not load the series.
RESULT_SUMMARY_KEYS = (
    "ok",
    "checked",
    "operations",
    "mismatch_count",
    "passed",
    "criterion",
    "seed",
    "precision_at_5_session_1",
    "precision_at_5_session_50",
    "examined",
    "penalized",
    "exempt",
    "not_penalized",
    "skipped_domain_checks",
    "objects",
    "changed",
)


def task_runs(
    *, kinds=None, state: str | None = None, descending: bool = True, sort: str = "created"
):
    qs = TaskRun.objects.defer("result")
    if kinds:
        qs = qs.filter(kind__in=list(kinds))
    if state:
        qs = qs.filter(state=state)
    qs = qs.annotate(**{f"r_{k}": KT(f"result__{k}") for k in RESULT_SUMMARY_KEYS})
    key = {
        "created": "created_at",
        "kind": "kind",
        "state": "state",
        "finished": "finished_at",
    }.get(sort, "created_at")
    order = F(key).desc(nulls_last=True) if descending else F(key).asc(nulls_last=True)
    return qs.order_by(order, "-created_at")


def run_summary(run) -> dict:
    """The summary fields of an annotated run as plain values: ``->>`` gives text on PostgreSQL
    ("true", "0.8") and SQL scalars on SQLite (1 for true)."""
    out = {}
    for key in RESULT_SUMMARY_KEYS:
        raw = getattr(run, f"r_{key}", None)
        if raw is None:
            continue
        if isinstance(raw, str):
            # A plain string (the criterion) is not JSON and stays as it is.
            with contextlib.suppress(ValueError):
                raw = json.loads(raw)
        if key in ("ok", "passed") and isinstance(raw, int):
            raw = bool(raw)
        out[key] = raw
    return out


def task_status(ids: list) -> list[dict]:
    rows = TaskRun.objects.filter(pk__in=ids).values(
        "id", "kind", "state", "progress", "started_at", "finished_at"
    )
    return [
        {
            "id": str(r["id"]),
            "kind": r["kind"],
            "state": r["state"],
            "progress": r["progress"],
            "finished": r["finished_at"] is not None,
        }
        for r in rows
    ]


def sweep_decisions(namespace: Namespace, limit: int = 12) -> list[dict]:
    """The newest IGNORED_CHECK decisions in a namespace (the ``op_ns_type_ts`` index)."""
    rows = (
        Operation.objects.filter(namespace=namespace.name, op_type="IGNORED_CHECK")
        .order_by("-ts", "-seq")
        .values("seq", "ts", "target_id", "payload")[:limit]
    )
    return list(rows)


def simulation_runs(kinds, ids: list) -> list[TaskRun]:
    return list(TaskRun.objects.filter(pk__in=ids, kind__in=list(kinds)))


def latest_runs(kinds) -> dict[str, TaskRun]:
    """The newest succeeded run of each kind, with its result (one query per kind, ≤ 3)."""
    out = {}
    for kind in kinds:
        run = (
            TaskRun.objects.filter(kind=kind, state=TaskRun.SUCCEEDED)
            .order_by("-created_at")
            .first()
        )
        if run is not None:
            out[kind] = run
    return out


# --- the closed loop: change events, alerts, webhooks -----------------------------------------


def object_events(obj, limit: int = 20) -> list[dict]:
    """The object's latest change events (newest first), each with what webhooks made of it:
    deliveries by state (one query for all of them)."""
    events = changes.target_events(obj.pk, limit=limit, newest_first=True)
    counts: dict[str, dict[str, int]] = {}
    rows = (
        WebhookDelivery.objects.filter(event_id__in=[e["id"] for e in events])
        .values_list("event_id", "state")
        .annotate(n=Count("id"))
    )
    for event_id, state, n in rows:
        counts.setdefault(event_id, {})[state] = n
    for event in events:
        event["deliveries"] = counts.get(event["id"], {})
    return events


def alert_history(namespace, limit: int = 8) -> list:
    return list(feedback_selectors.alerts(namespace=namespace)[:limit])


def open_alerts(namespace) -> dict[str, Alert]:
    """The namespace's open alert of each metric (at most one each: the snapshot opens one only
    when none is open)."""
    return {
        a.metric: a
        for a in feedback_selectors.alerts(namespace=namespace, state=Alert.OPEN).reverse()
    }
