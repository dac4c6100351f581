"""Read side of the feedback app."""

from __future__ import annotations

from datetime import datetime

from feedback import aggregates
from feedback.models import FeedbackAggregate
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
