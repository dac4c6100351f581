"""The overview page: namespace health (SPEC §10), metric cards, histograms and trends."""

from __future__ import annotations

from datetime import timedelta

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.charts import overview as charts
from dashboard.charts import retrieval as retrieval_charts
from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.selectors import overview as selectors
from dashboard.selectors import retrieval as retrieval_selectors
from feedback import metrics
from feedback.selectors import (
    REVIEW_USAGE_BELOW,
)


def _window(request) -> str:
    window = request.GET.get("window", selectors.DEFAULT_WINDOW)
    return window if window in selectors.WINDOWS else selectors.DEFAULT_WINDOW


# --- overview -----------------------------------------------------------------------------------


@require_GET
@dashboard_view(ANY_ROLE)
def overview(request):
    access = request.access
    namespaces = list(access.namespaces())
    window = _window(request)
    context = {"window": window, "windows": list(selectors.WINDOWS), "namespaces": namespaces}
    if not namespaces:
        return render(request, "dashboard/overview.html", context)
    name = request.GET.get("namespace")
    current = pick_namespace(namespaces, name) if name else None

    selectors.mark_overview_viewed()
    now = timezone.now()
    # The retrieval card's live tail is the page's slowest read: with the namespace known, it
    # runs on its own connection while the health sums and histograms are read on the others.
    retrieval_of = (
        selectors.started(
            retrieval_selectors.retrieval_trend, current, retrieval_selectors.OVERVIEW_DAYS, now
        )
        if current is not None
        else None
    )
    health, computed_at = selectors.namespace_health(namespaces, window)
    if current is None:
        # Without a choice, open on the namespace that needs attention.
        current = next((h.namespace for h in health if h.alerts), namespaces[0])
    by_ns = {h.namespace.pk: h for h in health}
    current_health = by_ns[current.pk]
    order = {metrics.STATE_ALERT: 0, metrics.STATE_OK: 1, metrics.STATE_NO_DATA: 2}
    summary = sorted(health, key=lambda h: (order[h.state], h.namespace.name))

    series = selectors.snapshot_series(current, now - selectors.SNAPSHOT_HISTORY)
    spark = series.since(now - selectors.SPARKLINE_SPAN)
    span = selectors.WINDOWS[window]
    trend = (
        selectors.snapshot_series(current, None, bucket="day")
        if span is None
        else series.since(now - max(span, timedelta(days=1)))
    )
    # The alert records are the one source for "since when": the history card lists them too.
    open_alerts = selectors.open_alerts(current)
    cards = []
    for name_ in metrics.METRIC_NAMES:
        m = current_health.evaluated[name_]
        since, before_history = series.alert_since(name_)
        cards.append(
            {
                "name": name_,
                "label": charts.METRIC_LABELS[name_],
                "definition": metrics.METRIC_DEFINITIONS[name_],
                **m,
                "sparkline": charts.sparkline_path(spark.values.get(name_, []), m["threshold"]),
                "alert_since": since,
                "alert_before_history": before_history,
                "open_alert": open_alerts.get(name_),
            }
        )
    warning_codes = {w["code"] for w in current_health.warnings}
    cannot_fix = [
        {**item, "highlighted": item["code"] in warning_codes}
        for item in metrics.FEEDBACK_CANNOT_FIX
    ]
    hist = selectors.histograms(namespaces, current)
    retrieval = (
        retrieval_of()
        if retrieval_of is not None
        else retrieval_selectors.retrieval_trend(current, retrieval_selectors.OVERVIEW_DAYS, now)
    )
    thresholds = {
        name_: current_health.evaluated[name_]["threshold"] for name_ in metrics.METRIC_NAMES
    }
    context.update(
        {
            "current": current,
            "health": current_health,
            "summary": summary,
            "cards": cards,
            "computed_at": computed_at,
            "cache_seconds": selectors.METRICS_CACHE_SECONDS,
            "warnings": current_health.warnings,
            "cannot_fix": cannot_fix,
            "has_injections": any(hist["usage"]),
            "has_objects": bool(hist["confidence"]),
            "has_snapshots": not trend.empty,
            "trend_bucket": trend.bucket,
            "usage_chart": charts.usage_histogram(hist["usage"], REVIEW_USAGE_BELOW),
            "confidence_chart": charts.confidence_histogram(hist["confidence"]),
            "trend_chart": charts.metric_trends(
                trend.buckets, trend.values, trend.alert, thresholds
            ),
            "review_below": REVIEW_USAGE_BELOW,
            "retrieval": retrieval,
            "retrieval_days": retrieval_selectors.OVERVIEW_DAYS,
            "retrieval_alerts": [
                {"label": retrieval_charts.ALERT_LABELS[name], **retrieval.alerts[name]}
                for name in metrics.RETRIEVAL_METRIC_NAMES
            ],
            "retrieval_chart": retrieval_charts.rates(
                retrieval.days, retrieval.by_day, retrieval.alerts
            ),
            "alert_history": [
                {
                    "alert": a,
                    "label": charts.METRIC_LABELS.get(a.metric)
                    or retrieval_charts.ALERT_LABELS.get(a.metric, a.metric),
                }
                for a in selectors.alert_history(current)
            ],
        }
    )
    return render(request, "dashboard/overview.html", context)
