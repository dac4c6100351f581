"""Read side of the feedback app."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q, Sum

from feedback import aggregates, metrics
from feedback.metrics import WASTE_USAGE_RATIO
from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent, SessionNamespace
from rms.models import MemoryObject
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


def metric_inputs(namespace, since: datetime | None = None, until: datetime | None = None):
    """The raw sums of the four metrics: four indexed aggregate queries, whatever the volume."""
    active = FeedbackAggregate.objects.filter(namespace=namespace, total_injections__gte=1).exclude(
        object__epistemic_type=DEPRECATED
    )
    usage = active.aggregate(total=Sum("usage_ratio"), n=Count("pk"))
    sessions = _window(
        SessionNamespace.objects.filter(namespace=namespace), since, until
    ).aggregate(
        n=Count("id"),
        corrected=Count("id", filter=Q(has_corrected=True)),
        budget=Sum("context_budget"),
    )
    injections = _window(InjectionEvent.objects.filter(namespace=namespace), since, until)
    inj = injections.aggregate(
        n=Count("id"),
        unused=Count("id", filter=Q(ended_unused=True)),
        wasted=Sum("token_cost", filter=Q(object__aggregate__usage_ratio__lt=WASTE_USAGE_RATIO)),
    )
    return metrics.MetricInputs(
        usage_ratio_sum=usage["total"] or 0.0,
        usage_ratio_count=usage["n"],
        sessions=sessions["n"],
        sessions_with_corrected=sessions["corrected"],
        wasted_token_cost=inj["wasted"] or 0,
        context_budget_total=sessions["budget"] or 0,
        unused_injections=inj["unused"],
        injections=inj["n"],
    )


def namespace_metrics(namespace, since=None, until=None) -> dict:
    evaluated = metrics.evaluate(metric_inputs(namespace, since, until), namespace.alert_thresholds)
    return {
        "namespace": namespace.name,
        "window": {"since": iso(since), "until": iso(until)},
        "metrics": evaluated,
        "warnings": metrics.warnings(evaluated),
    }


# --- review queue (SPEC §8) ------------------------------------------------------------------

REVIEW_USAGE_BELOW = 0.10
REVIEW_MIN_INJECTIONS = 20


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
