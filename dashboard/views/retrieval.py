"""The retrieval-quality page: is retrieval getting better, and at which rank does it fail
(docs/METRICS.md). Per namespace, optionally one API client's sessions, over the last days."""

from __future__ import annotations

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.charts import retrieval as charts
from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.selectors import retrieval as selectors
from feedback import metrics

ACTOR_MAX = 100


def _days(request) -> int:
    try:
        days = int(request.GET.get("days", selectors.DEFAULT_DAYS))
    except ValueError:
        return selectors.DEFAULT_DAYS
    return days if days in selectors.WINDOW_DAYS else selectors.DEFAULT_DAYS


@require_GET
@dashboard_view(ANY_ROLE)
def retrieval(request):
    namespaces = list(request.access.namespaces())
    days = _days(request)
    actor = (request.GET.get("actor") or "").strip()[:ACTOR_MAX] or None
    context = {
        "namespaces": namespaces,
        "days": days,
        "window_days": selectors.WINDOW_DAYS,
        "actor": actor or "",
    }
    if not namespaces:
        return render(request, "dashboard/retrieval.html", context)
    current = pick_namespace(namespaces, request.GET.get("namespace"))
    trend = selectors.retrieval_trend(current, days, timezone.now(), actor)
    ranks = trend.ranks()
    chart_ranks = [r for r in ranks if r <= selectors.CHART_RANKS]
    window = trend.window
    rank_rows = [
        {
            "rank": r,
            "injections": window["injections_by_rank"][str(r)],
            "used": round(
                window["precision_at_rank"][str(r)] * window["injections_by_rank"][str(r)]
            ),
            "precision": window["precision_at_rank"][str(r)],
            "wasted": window["wasted_tokens_by_rank"][str(r)],
        }
        for r in ranks
    ]
    worst = min(rank_rows[:3], key=lambda row: row["precision"], default=None)
    context.update(
        {
            "current": current,
            "trend": trend,
            "window": window,
            "alerts": [
                {
                    "name": name,
                    "label": charts.ALERT_LABELS[name],
                    "definition": metrics.METRIC_DEFINITIONS[name],
                    **trend.alerts[name],
                }
                for name in metrics.RETRIEVAL_METRIC_NAMES
            ],
            "wasted_total": sum(window["wasted_tokens_by_rank"].values()),
            "rank_rows": rank_rows,
            "worst_rank": worst["rank"] if worst else None,
            "rates_chart": charts.rates(trend.days, trend.by_day, trend.alerts),
            "precision_chart": charts.precision_by_rank(trend.days, trend.by_day, chart_ranks),
            "wasted_chart": charts.wasted_by_rank(trend.days, trend.by_day, chart_ranks),
            "by_rank_chart": charts.window_by_rank(window, chart_ranks),
        }
    )
    return render(request, "dashboard/retrieval.html", context)
