"""Read side of the feedback app."""

from __future__ import annotations

import contextlib
import functools
import operator
import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta

from django.db.models import Count, Exists, Min, OuterRef, Q, Sum
from django.db.models.functions import Trunc, TruncDate
from django.utils import timezone

from feedback import (
    aggregate_sums,
    aggregates,
    metrics,
    object_rollup,
    retrieval,
    retrieval_quality,
    session_view,
    utility,
    window_rollup,
)
from feedback import window_sums as window_sums_module
from feedback.aggregate_sums import REVIEW_MIN_INJECTIONS, REVIEW_USAGE_BELOW
from feedback.metrics import WASTE_USAGE_RATIO
from feedback.models import (
    Alert,
    FeedbackAggregate,
    FeedbackSession,
    InjectionEvent,
    SessionNamespace,
    SignalRecord,
)
from rms import selectors as core
from rms import store
from rms.errors import DomainError, Forbidden
from rms.models import ApiClient, MemoryObject, Namespace
from rms.policy import DEPRECATED
from rms.replay import iso


def aggregate_from_row(row: FeedbackAggregate | None) -> aggregates.Aggregate:
    if row is None:
        return aggregates.Aggregate()
    return aggregates.Aggregate(**{f: getattr(row, f) for f in aggregates.FIELDS})


def aggregate_out(agg: aggregates.Aggregate) -> dict:
    """JSON form of an aggregate: times in the one ISO format of the API."""
    return {k: iso(v) if isinstance(v, datetime) else v for k, v in agg.as_dict().items()}


def aggregate_extra(objects: list) -> dict:
    """The ``aggregate`` of each object (SPEC §8), in one query; registered with ``rms``."""
    rows = {r.object_id: r for r in FeedbackAggregate.objects.filter(object__in=objects)}
    return {
        obj.pk: {"aggregate": aggregate_out(aggregate_from_row(rows.get(obj.pk)))}
        for obj in objects
    }


# --- metrics (SPEC §10) ----------------------------------------------------------------------


def _window(qs, since: datetime | None, until: datetime | None):
    if since is not None:
        qs = qs.filter(ts__gte=since)
    if until is not None:
        qs = qs.filter(ts__lte=until)
    return qs


def session_sums(namespace_ids: list[int], since=None, until=None) -> dict[int, dict]:
    """{namespace id: {"n", "corrected", "budget"}} of the sessions in the window (SPEC §10: a
    session counts in every namespace of its scope), one grouped query for all namespaces."""
    rows = (
        _window(SessionNamespace.objects.filter(namespace_id__in=namespace_ids), since, until)
        .values("namespace_id")
        .annotate(**window_rollup.session_sum_fields())
        .order_by()
    )
    return {r["namespace_id"]: r for r in rows}


def injection_sums(namespace_ids: list[int], since=None, until=None) -> dict[int, dict]:
    """{namespace id: {"n", "unused", "wasted"}} of the injections in the window, one grouped
    query for all namespaces.

    Without a window the sums come from the aggregates
    (``feedback.object_rollup.lifetime_injection_part``). With a window the injections are
    scanned through the (namespace, ts) covering index and "wasted" sums those whose object is
    below 0.05 (``rms.store``: one hash of those objects, not a join of every injection to its
    object and aggregate). A test pins both forms to the same numbers.
    """
    wasteful = Q(usage_ratio__lt=WASTE_USAGE_RATIO)
    if since is None and until is None:
        return {
            ns: {"namespace_id": ns, "n": n, "unused": unused, "wasted": wasted}
            for ns, _, _, _, n, unused, wasted in object_rollup.lifetime_injection_part(
                namespace_ids
            )
        }
    wasteful_ids = FeedbackAggregate.objects.filter(
        wasteful, namespace_id__in=namespace_ids
    ).values("object_id")
    injections = _window(
        InjectionEvent.objects.filter(namespace_id__in=namespace_ids), since, until
    )
    return store.get().injection_window_sums(injections, wasteful_ids)


def window_sums(
    namespace_ids: list[int], since=None, until=None
) -> tuple[dict[int, dict], dict[int, dict]]:
    """``session_sums`` and ``injection_sums`` of the window, with the whole hours read from
    the hourly rollup (``feedback.window_rollup``; tests pin them to the live forms): what the
    metrics read. Without a window the injection sums come from the aggregates."""
    lifetime = since is None and until is None
    sums = window_rollup.window_sums_by_namespace(namespace_ids, since, until, lifetime=lifetime)
    return (
        {ns: window_sums_module.session_row(ns, s) for ns, s in sums.items()},
        {ns: window_sums_module.injection_row(ns, s) for ns, s in sums.items()},
    )


def inputs_from(usage_sum, usage_count, sessions: dict, injections: dict) -> metrics.MetricInputs:
    """MetricInputs from the sums above (a namespace without rows has empty dicts)."""
    return metrics.MetricInputs(
        usage_ratio_sum=usage_sum or 0.0,
        usage_ratio_count=usage_count or 0,
        sessions=sessions.get("n") or 0,
        sessions_with_corrected=sessions.get("corrected") or 0,
        wasted_token_cost=injections.get("wasted") or 0,
        context_budget_total=sessions.get("budget") or 0,
        unused_injections=injections.get("unused") or 0,
        injections=injections.get("n") or 0,
    )


def metric_inputs(namespace, since: datetime | None = None, until: datetime | None = None):
    """The raw sums of the four metrics of one namespace: the usage ratios (the aggregate sums
    of the rollup, ``feedback.object_rollup.aggregate_sums_by_namespace``), then the window's
    sums (``window_sums``)."""
    ids = [namespace.pk]
    bins = object_rollup.aggregate_sums_by_namespace(ids, lifetime=False).get(namespace.pk, {})
    usage = aggregate_sums.usage_totals(bins)
    sessions, injections = window_sums(ids, since, until)
    return inputs_from(
        usage.usage_sum,
        usage.objects,
        sessions.get(namespace.pk, {}),
        injections.get(namespace.pk, {}),
    )


def namespace_metrics(namespace, since=None, until=None) -> dict:
    evaluated = metrics.evaluate(metric_inputs(namespace, since, until), namespace.alert_thresholds)
    return {
        "namespace": namespace.name,
        "window": {"since": iso(since), "until": iso(until)},
        "metrics": evaluated,
        "warnings": metrics.warnings(evaluated),
    }


# --- retrieval quality (docs/METRICS.md) -------------------------------------------------------


def _ranges_q(ranges) -> Q:
    """Rows whose ts lies in one of the half-open ``ranges`` [lo, hi) (None: open)."""
    parts = []
    for lo, hi in ranges:
        part = Q()
        if lo is not None:
            part &= Q(ts__gte=lo)
        if hi is not None:
            part &= Q(ts__lt=hi)
        if not part:
            return Q()  # an open range: every row
        parts.append(part)
    return functools.reduce(operator.or_, parts) if parts else Q(pk__in=[])


def _retrieval_sets(namespace, since, until, actor_id, ranges=None, bounds=None):
    """The window's injections of ``namespace`` (with ``actor_id``, only the sessions that API
    client recorded) and those of them that were used. ``ranges``: half-open ts ranges instead
    of the window [since, until]; ``bounds``: (injection id, signal id), only the rows up to
    them (what the retrieval rollup holds)."""
    injections = InjectionEvent.objects.filter(namespace=namespace)
    signals = SignalRecord.objects.filter(signal_type__in=utility.USED_SIGNALS)
    if ranges is None:
        injections = _window(injections, since, until)
    else:
        injections = injections.filter(_ranges_q(ranges))
    if actor_id is not None:
        clients = ApiClient.objects.filter(name=actor_id).values("pk")
        injections = injections.filter(session__client__in=clients)
    if bounds is not None:
        injections = injections.filter(id__lte=bounds[0])
        signals = signals.filter(id__lte=bounds[1])
    if store.get().bounded_semi_join:
        # A session's signals carry its ts, so the same window bounds them: a semi-join reads
        # the window's signals through the (namespace, ts) index, not every signal of the
        # namespace. (Without it, each injection probes its session's signals by index.)
        signals = signals.filter(namespace=namespace)
        if ranges is None:
            signals = _window(signals, since, until)
        else:
            signals = signals.filter(_ranges_q(ranges))
    used = injections.filter(
        Exists(
            signals.filter(
                feedback_session_id=OuterRef("session_id"), object_id=OuterRef("object_id")
            )
        )
    )
    return injections, used


def retrieval_rows(
    namespace, since: datetime | None = None, until: datetime | None = None, actor_id=None
) -> tuple[list, int, list]:
    """The arguments of ``retrieval_quality.evaluate`` for the namespace's injections in the
    window; with ``actor_id``, only the sessions that API client recorded.

    Grouped queries over the (namespace, ts) index, so no injection row leaves the database;
    "used" is an EXISTS in WHERE (a semi-join on PostgreSQL, not a probe per row)."""
    injections, used = _retrieval_sets(namespace, since, until, actor_id)
    per_rank = {
        rank: (n, tokens or 0)
        for rank, n, tokens in injections.values_list("rank_position")
        .annotate(n=Count("*"), tokens=Sum("token_cost"))
        .order_by()
    }
    used_per_rank = {
        rank: (n, tokens or 0)
        for rank, n, tokens in used.values_list("rank_position")
        .annotate(n=Count("*"), tokens=Sum("token_cost"))
        .order_by()
    }
    ranks = []
    for rank, (n, tokens) in per_rank.items():
        n_used, used_tokens = used_per_rank.get(rank, (0, 0))
        ranks.append(retrieval_quality.RankRow(rank, n, n_used, tokens, used_tokens))
    sessions = injections.values("session_id").distinct().count()
    hits = (
        used.values("session_id").annotate(best=Min("rank_position")).values_list("best", flat=True)
    )
    return ranks, sessions, list(hits.order_by())


def retrieval_rows_daily(
    namespace, since: datetime | None = None, until: datetime | None = None, actor_id=None
) -> dict[date, retrieval_quality.DayRows]:
    """``retrieval_rows`` per UTC day of the window, in four grouped queries whatever its
    length. A session's injections all carry its ts, so each session falls in exactly one day
    and the days add up to the window (``retrieval_quality.merge_days``)."""
    grouped = _retrieval_rows_grouped(namespace, since, until, actor_id, ())
    return {key[0]: rows for key, rows in grouped.items()}


def retrieval_rows_in(
    namespace, ranges, actor_id=None, *, unit: str = "day", by_client=False, bounds=None
) -> dict[tuple, retrieval_quality.DayRows]:
    """``{(day or hour, [API client id]): DayRows}`` of the injections in the half-open ts
    ``ranges``: the retrieval rollup's unit of storage (``unit`` "hour": keyed by the UTC hour,
    as an aware datetime), its live parts, and with ``bounds`` (injection id, signal id) what
    the rollup holds (``feedback.retrieval_rollup``). The same four grouped queries."""
    extra = ("session__client_id",) if by_client else ()
    return _retrieval_rows_grouped(
        namespace, None, None, actor_id, extra, ranges=ranges, bounds=bounds, unit=unit
    )


def _retrieval_rows_grouped(
    namespace, since, until, actor_id, extra: tuple, *, ranges=None, bounds=None, unit="day"
) -> dict:
    """``{(day, *extra values): DayRows}`` in four grouped queries, sorted."""
    injections, used = _retrieval_sets(namespace, since, until, actor_id, ranges, bounds)
    trunc = TruncDate("ts") if unit == "day" else Trunc("ts", "hour", tzinfo=UTC)
    injections = injections.annotate(day=trunc)
    used = used.annotate(day=trunc)
    keys = ("day", *extra)
    n = len(keys)
    per_rank = {
        tuple(row[: n + 1]): (row[n + 1], row[n + 2] or 0)
        for row in injections.values_list(*keys, "rank_position")
        .annotate(n=Count("*"), tokens=Sum("token_cost"))
        .order_by()
    }
    used_per_rank = {
        tuple(row[: n + 1]): (row[n + 1], row[n + 2] or 0)
        for row in used.values_list(*keys, "rank_position")
        .annotate(n=Count("*"), tokens=Sum("token_cost"))
        .order_by()
    }
    sessions = (
        injections.values_list(*keys)
        .annotate(n=Count("session_id", distinct=True))
        .values_list(*keys, "n")
        .order_by()
    )
    groups = {
        tuple(row[:n]): retrieval_quality.DayRows([], row[n], Counter())
        for row in sessions
        if row[0] is not None
    }
    for key_rank, (count, tokens) in per_rank.items():
        n_used, used_tokens = used_per_rank.get(key_rank, (0, 0))
        groups[key_rank[:n]].ranks.append(
            retrieval_quality.RankRow(key_rank[n], count, n_used, tokens, used_tokens)
        )
    for row in (
        used.values(*keys, "session_id")
        .annotate(best=Min("rank_position"))
        .values_list(*keys, "best")
        .order_by()
    ):
        groups[tuple(row[:n])].hits[row[n]] += 1
    return dict(sorted(groups.items()))


def namespace_retrieval_quality(
    namespace, since: datetime | None = None, until: datetime | None = None, actor_id=None
) -> dict:
    """``/retrieval-quality``: whole days and hours of the window from the retrieval rollup,
    the rest live (``feedback.retrieval_rollup.retrieval_window``, which the dashboard's
    trends read too); the same numbers as ``retrieval_rows``' live form."""
    # Imported here: the rollup module is built on this module's grouped selectors.
    from feedback.retrieval_rollup import retrieval_window

    rows = retrieval_window(namespace, since, until, actor_id)
    answer = retrieval_quality.evaluate_counts(rows.ranks, rows.sessions, rows.hits)
    return {
        "namespace": namespace.name,
        "window": {"since": iso(since), "until": iso(until)},
        "actor_id": actor_id,
        **answer,
        "alerts": metrics.evaluate_retrieval(answer, namespace.alert_thresholds),
    }


#: The window and the ranks of the retrieval-quality gauges on /metrics.
RETRIEVAL_GAUGE_WINDOW = timedelta(hours=24)
RETRIEVAL_GAUGE_RANKS = (1, 2, 3, 4, 5)


def retrieval_quality_gauges():
    """``rms_retrieval_hit_rate``, ``rms_retrieval_mrr`` and ``rms_retrieval_precision_at_rank``
    per namespace over the last 24 h, read when /metrics is scraped; a figure without data is
    absent rather than 0 (docs/METRICS.md); and ``rms_retrieval_alert_threshold`` of the two
    that alert (hit rate, precision at rank 1), the window the snapshots alert on."""
    from prometheus_client.core import GaugeMetricFamily

    hit_rate = GaugeMetricFamily(
        "rms_retrieval_hit_rate",
        "Share of the last 24 h's feedback sessions with a used injection.",
        labels=["namespace"],
    )
    mrr = GaugeMetricFamily(
        "rms_retrieval_mrr",
        "Mean reciprocal rank of the first used injection, last 24 h.",
        labels=["namespace"],
    )
    precision = GaugeMetricFamily(
        "rms_retrieval_precision_at_rank",
        "Used injections at a rank / injections at that rank, last 24 h.",
        labels=["namespace", "rank"],
    )
    threshold = GaugeMetricFamily(
        "rms_retrieval_alert_threshold",
        "The namespace's alert threshold of a retrieval metric (alert below it).",
        labels=["namespace", "metric"],
    )
    since = timezone.now() - RETRIEVAL_GAUGE_WINDOW
    for ns in Namespace.objects.order_by("name"):
        answer = retrieval_quality.evaluate(*retrieval_rows(ns, since))
        if answer["sessions"]:
            for name, value in metrics.evaluate_retrieval(answer, ns.alert_thresholds).items():
                threshold.add_metric([ns.name, name], value["threshold"])
            hit_rate.add_metric([ns.name], answer["hit_rate"])
            mrr.add_metric([ns.name], answer["mrr"])
        for rank in RETRIEVAL_GAUGE_RANKS:
            value = answer["precision_at_rank"].get(str(rank))
            if value is not None:
                precision.add_metric([ns.name, str(rank)], value)
    return [hit_rate, mrr, precision, threshold]


# --- review queue (SPEC §8) ------------------------------------------------------------------


def review_queue(namespace):
    """Active objects that keep being injected but are almost never used, worst first."""
    return (
        MemoryObject.objects.select_related("namespace", "aggregate")
        .filter(
            namespace=namespace,
            aggregate__usage_ratio__lt=REVIEW_USAGE_BELOW,
            aggregate__total_injections__gte=REVIEW_MIN_INJECTIONS,
        )
        .exclude(epistemic_type=DEPRECATED)
        .order_by("aggregate__usage_ratio", "-aggregate__total_injections", "id")
    )


# --- sessions --------------------------------------------------------------------------------


def visible_session(client, session_id) -> FeedbackSession | None:
    session = FeedbackSession.objects.filter(pk=session_id).first()
    if session is None:
        return None
    if any(client.can_see(name) for name in session.namespace_scope):
        return session
    return None


def visible_session_by_key(client, key: str) -> FeedbackSession | None:
    """The record whose id is ``key`` or, failing that, the newest record (by ts) of the
    session whose ``session_id`` is ``key`` that the caller may see. A
    session_id may name several records (one per request_id)."""
    with contextlib.suppress(ValueError):
        session = visible_session(client, uuid.UUID(key))
        if session is not None:
            return session
    names = client.namespace_names()
    qs = FeedbackSession.objects.filter(session_id=key)
    if names is not None:
        qs = qs.filter(scopes__namespace__name__in=names)
    return qs.order_by("-ts", "-last_op_ts", "-id").first()


def readable_object_ids(client, ids: set[str]) -> set[str]:
    """The ids among ``ids`` of objects in namespaces the caller may read (one query)."""
    pks = set()
    for text in ids:
        with contextlib.suppress(ValueError):
            pks.add(uuid.UUID(text))
    qs = MemoryObject.objects.filter(pk__in=pks)
    names = client.namespace_names()
    if names is not None:
        qs = qs.filter(namespace__name__in=names)
    return {str(pk) for pk in qs.values_list("pk", flat=True)}


def records_for_reader(client, records: list[dict]) -> list[dict]:
    """Session records as the caller may see them (``feedback.session_view``): one query for
    the whole list, none for a caller who reads every namespace."""
    names = client.namespace_names()
    if names is None:
        return records
    ids = set().union(*(session_view.object_ids(r) for r in records)) if records else set()
    readable = readable_object_ids(client, ids)
    return [session_view.record_for_reader(r, readable, names) for r in records]


# --- alerts (API.md "The closed loop") ----------------------------------------------------------


def alerts(*, namespace=None, visible: set[str] | None = None, state: str | None = None):
    """Alerts newest first: of one namespace, or of every namespace in ``visible`` (None: all)."""
    qs = Alert.objects.select_related("namespace").order_by("-raised_at", "-id")
    if namespace is not None:
        qs = qs.filter(namespace=namespace)
    elif visible is not None:
        qs = qs.filter(namespace__name__in=visible)
    if state is not None:
        qs = qs.filter(state=state)
    return qs


def alerts_before(qs, raised_at: datetime, last_id: uuid.UUID):
    """The rows after a keyset position (raised_at, id) in newest-first order."""
    return qs.filter(Q(raised_at__lt=raised_at) | Q(raised_at=raised_at, id__lt=last_id))


def ranking_inputs(obj, agg) -> retrieval.RankingInputs:
    """One object's ranking inputs (its row and its aggregate, which may not exist yet)."""
    return retrieval.RankingInputs(
        epistemic_type=obj.epistemic_type,
        condition_state=obj.condition_state,
        confidence=obj.confidence,
        salience_base=obj.salience_base,
        reinforcement_boost=obj.reinforcement_boost,
        decay_profile=obj.decay_profile,
        pinned=obj.pinned,
        last_reinforced_at=obj.last_reinforced_at,
        created_at=obj.created_at,
        utility=agg.utility if agg else utility.UTILITY_START,
        uses=agg.uses if agg else 0,
        last_use_at=agg.last_use_at if agg else None,
    )


def namespace_profile(ns: Namespace) -> retrieval.Profile:
    """The namespace's retrieval profile; 409 when what is stored is not a valid one."""
    try:
        return retrieval.profile_from(ns.weights or None, ns.retrieval or None)
    except ValueError as exc:
        raise DomainError("bad_namespace_weights", str(exc), 409) from exc


def rank_candidates(
    client: ApiClient, namespace: str, candidates: list[dict], *, now: datetime | None = None
) -> dict:
    """The ranking of ``candidates`` (``object_id``, ``similarity``) in ``namespace`` by its
    retrieval profile (SPEC §12) at the clock ``now``: eligible first, best score first, ties
    by object id; each result says whether it is eligible and why not. 403 for a namespace the
    client may not read, 400 for an unknown namespace or a candidate outside it, 409 when the
    namespace's profile is invalid. Read-only: two queries (objects, aggregates) after the
    namespace."""
    if not client.can_see(namespace):
        raise Forbidden(f"You may not read namespace {namespace!r}.")
    ns = Namespace.objects.filter(name=namespace).first()
    if ns is None:
        raise DomainError(
            "unknown_namespace",
            f"Namespace {namespace!r} does not exist.",
            400,
            {"namespace": ["Unknown namespace."]},
        )
    ids = [c["object_id"] for c in candidates]
    objs = core.visible_objects(client, ids, "candidates", namespace=ns)
    aggs = {a.object_id: a for a in FeedbackAggregate.objects.filter(object_id__in=ids)}
    profile = namespace_profile(ns)
    now = now or timezone.now()
    results = []
    for cand in candidates:
        obj = objs[cand["object_id"]]
        inputs = ranking_inputs(obj, aggs.get(cand["object_id"]))
        ranked = retrieval.rank_one(inputs, cand["similarity"], now, profile)
        results.append(
            {
                "object_id": str(obj.pk),
                "score": ranked.score,
                "eligible": ranked.eligible,
                "reason": ranked.reason,
                "similarity": cand["similarity"],
                "hotness": ranked.hotness,
                "utility": inputs.utility,
                "confidence": obj.confidence,
                "salience_effective": ranked.salience_effective,
            }
        )
    results.sort(key=lambda r: retrieval.order_key(r["eligible"], r["score"], r["object_id"]))
    return {
        "namespace": ns.name,
        "now": iso(now),
        "profile": retrieval.profile_out(profile),
        "results": results,
    }


def stored_request_ids(client: ApiClient, request_ids: set) -> set:
    """The request ids among ``request_ids`` for which the client has a stored feedback
    session (read without a lock)."""
    return set(
        FeedbackSession.objects.filter(client=client, request_id__in=request_ids).values_list(
            "request_id", flat=True
        )
    )
