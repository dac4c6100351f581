"""The alerts page: open and resolved alerts of every visible namespace and metric, with when
each was raised, for how long, at which value against which threshold."""

from __future__ import annotations

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.charts import overview as charts
from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.selectors import alerts as selectors
from dashboard.views.common import PER_PAGE_CHOICES, page_of, per_page_of, sort_of
from feedback.models import Alert


@require_GET
@dashboard_view(ANY_ROLE)
def alerts(request):
    access = request.access
    namespaces = list(access.namespaces())
    name = request.GET.get("namespace")
    ns = pick_namespace(namespaces, name) if name else None
    # The four metrics, and any other an alert was raised on (labels fall back to the name).
    known = dict(charts.METRIC_LABELS)
    for name in selectors.alert_metrics():
        known.setdefault(name, name)
    metric = request.GET.get("metric") or None
    if metric not in known:
        metric = None
    state = request.GET.get("state") or None
    if state not in (Alert.OPEN, Alert.RESOLVED):
        state = None
    sort, descending = sort_of(request, selectors.ALERT_SORTS, selectors.ALERT_DEFAULT_SORT, True)
    now = timezone.now()
    qs = selectors.alert_rows(
        visible=access.client.namespace_names(),
        namespace=ns,
        metric=metric,
        state=state,
        sort=sort,
        descending=descending,
        now=now,
    )
    page = page_of(request, qs)
    rows = [
        {"alert": a, "label": charts.METRIC_LABELS.get(a.metric, a.metric)}
        for a in page.object_list
    ]
    context = {
        "namespaces": namespaces,
        "current": ns,
        "metrics": known.items(),
        "metric": metric,
        "state": state,
        "filtered": bool(ns or metric or state),
        "page": page,
        "rows": rows,
        "sort": sort,
        "descending": descending,
        "per_page": per_page_of(request),
        "per_page_choices": PER_PAGE_CHOICES,
        "now": now,
    }
    return render(request, "dashboard/alerts.html", context)
