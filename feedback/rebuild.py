"""Rebuild every aggregate from the operation log alone (SPEC §8).

One ordered pass over the log (a server-side cursor on PostgreSQL, so memory holds one batch of
operations plus one small accumulator per object), folding through the same pure functions the
live services call, in the same ``seq`` order: the result equals the live values exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from django.db import transaction

from feedback import aggregates
from feedback.models import FeedbackAggregate
from rms.models import MemoryObject, Operation

CHUNK = 5000
#: Operations folded between two progress reports.
PROGRESS_EVERY = 500
#: Aggregates written per statement in the final write (progress is reported between them).
WRITE_BATCH = 1000
OP_TYPES = ("INJECTION_EVENT", "FEEDBACK_EVENT", "FEEDBACK_SESSION", "IGNORED_CHECK")


def fold_log(object_ids: set | None = None, progress: Callable[[int], None] | None = None) -> dict:
    """{object_id: Aggregate} folded from the log; ``object_ids`` limits what is kept."""
    result: dict = {}

    def agg(object_id) -> aggregates.Aggregate | None:
        if object_ids is not None and object_id not in object_ids:
            return None
        value = result.get(object_id)
        if value is None:
            value = result[object_id] = aggregates.Aggregate()
        return value

    rows = (
        Operation.objects.filter(op_type__in=OP_TYPES)
        .order_by("seq")
        .values_list("op_type", "target_id", "ts", "payload")
        .iterator(chunk_size=CHUNK)
    )
    for n, (op_type, target_id, ts, payload) in enumerate(rows, 1):
        if op_type == "INJECTION_EVENT":
            if (a := agg(target_id)) is not None:
                aggregates.on_injection(a, payload["token_cost"])
        elif op_type == "FEEDBACK_EVENT":
            if (a := agg(target_id)) is not None:
                aggregates.on_signal(
                    a, payload["signal_type"], payload["effect"], payload["effective_weight"], ts
                )
        elif op_type == "IGNORED_CHECK":
            if (a := agg(target_id)) is not None:
                aggregates.on_ignored_check(a, payload["unused_sessions"])
        else:
            _session_end(payload, ts, agg)
        if progress is not None and n % min(CHUNK, PROGRESS_EVERY) == 0:
            progress(n)
    return result


def _session_end(payload: dict, ts: datetime, agg) -> None:
    received: dict[str, list[str]] = {}
    for s in payload["signals"]:
        received.setdefault(s["object_id"], []).append(s["signal_type"])
    unused = set(payload["unused_ids"])
    for object_id in payload["injected_object_ids"]:
        a = agg(UUID(object_id))
        if a is None:
            continue
        types = received.get(object_id) or (["UNUSED"] if object_id in unused else [])
        aggregates.on_session_end(a, signal_types=types, outcome=payload["outcome"], ts=ts)


def rebuild_aggregates(
    namespace=None,
    progress: Callable[[int], None] | None = None,
    written: Callable[[float], None] | None = None,
) -> dict:
    """Recompute and store every aggregate from the log; returns counts of what changed.

    ``progress(n)`` is called every PROGRESS_EVERY operations folded, ``written(fraction)``
    after each WRITE_BATCH aggregates of the final write (one transaction: all or none).
    Idempotent: a rerun (or a rerun after a crash midway) writes the same values.
    """
    objects = MemoryObject.objects.all()
    if namespace is not None:
        objects = objects.filter(namespace=namespace)
    ns_of = dict(objects.values_list("pk", "namespace_id"))
    folded = fold_log(set(ns_of), progress)
    changed = 0
    with transaction.atomic():
        live = {a.object_id: a for a in FeedbackAggregate.objects.filter(object_id__in=folded)}
        new, update = [], []
        for object_id, agg in folded.items():
            row = live.get(object_id)
            if row is None:
                row = FeedbackAggregate(object_id=object_id, namespace_id=ns_of[object_id])
                new.append(row)
            elif all(getattr(row, f) == getattr(agg, f) for f in aggregates.FIELDS):
                continue
            else:
                update.append(row)
            for f in aggregates.FIELDS:
                setattr(row, f, getattr(agg, f))
            row.usage_ratio = agg.usage_ratio
            changed += 1
        todo = len(new) + len(update)
        for start in range(0, len(new), WRITE_BATCH):
            FeedbackAggregate.objects.bulk_create(new[start : start + WRITE_BATCH])
            if written is not None:
                written(min(len(new), start + WRITE_BATCH) / todo)
        for start in range(0, len(update), WRITE_BATCH):
            FeedbackAggregate.objects.bulk_update(
                update[start : start + WRITE_BATCH], [*aggregates.FIELDS, "usage_ratio"]
            )
            if written is not None:
                written((len(new) + min(len(update), start + WRITE_BATCH)) / todo)
        if written is not None and not todo:
            written(1.0)
    return {"objects": len(folded), "changed": changed}
