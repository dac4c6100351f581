"""Reads of the alerts page: every alert of the visible namespaces, filtered and sorted."""

from __future__ import annotations

from datetime import datetime

from django.db.models import DurationField, ExpressionWrapper, F, Value
from django.db.models.functions import Coalesce

from feedback import selectors as feedback_selectors
from feedback.models import Alert

ALERT_SORTS = {
    "raised": "raised_at",
    "resolved": "resolved_at",
    "duration": "elapsed",
    "value": "value",
    "namespace": "namespace__name",
    "metric": "metric",
}
ALERT_DEFAULT_SORT = "raised"


def alert_metrics() -> list[str]:
    """Every metric an alert was ever raised on."""
    return list(Alert.objects.values_list("metric", flat=True).distinct().order_by("metric"))


def alert_rows(
    *,
    visible: set[str] | None,
    namespace=None,
    metric: str | None = None,
    state: str | None = None,
    sort: str,
    descending: bool,
    now: datetime,
):
    """Alerts of ``namespace`` (or of every visible one), each with ``elapsed``: how long it
    lasted, so far for an open one (at ``now``); ordered by a column, ties newest first."""
    qs = feedback_selectors.alerts(namespace=namespace, visible=visible, state=state)
    if metric:
        qs = qs.filter(metric=metric)
    qs = qs.annotate(
        elapsed=ExpressionWrapper(
            Coalesce(F("resolved_at"), Value(now)) - F("raised_at"),
            output_field=DurationField(),
        )
    )
    field_name = ALERT_SORTS.get(sort, ALERT_SORTS[ALERT_DEFAULT_SORT])
    order = (
        F(field_name).desc(nulls_first=True) if descending else F(field_name).asc(nulls_last=True)
    )
    return qs.order_by(order, "-raised_at", "-id")
