"""Rebuild every aggregate from the operation log alone (SPEC §8).

The log is folded through the same pure functions the live services call, in the same ``seq``
order: the result equals the live values exactly.

Two ways in. :func:`fold_log` is one ordered pass over the whole log (a server-side cursor on
PostgreSQL). :func:`rebuild_objects` rebuilds a set of objects in one transaction, live writes
and all: it takes the objects' row locks first (in primary-key order, as every writer does),
and every write that moves an aggregate holds its object's lock and appends its operation in
the same transaction, so under the locks the log of those objects is complete and stays still
while it is folded and the aggregates written. It reads only the operations of those objects
plus the FEEDBACK_SESSION operations of the sessions that injected them (named by each
INJECTION_EVENT's ``feedback_session_id``), so a chunk costs its own share of the log. The
worker fans a rebuild out as key-range chunks (``taskruns.chunks``), one transaction each.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from datetime import datetime
from operator import itemgetter
from uuid import UUID

from django.db import transaction
from django.db.models.fields.json import KT

from feedback import aggregates, object_rollup, window_rollup
from feedback.aggregate_sums import wasteful
from feedback.models import FeedbackAggregate
from rms import policy, store
from rms.models import ChainCheckpoint, MemoryObject, Operation

CHUNK = 5000
#: Operations folded between two progress reports.
PROGRESS_EVERY = 500
#: Aggregates written per statement.
WRITE_BATCH = 1000
OP_TYPES = ("INJECTION_EVENT", "FEEDBACK_EVENT", "FEEDBACK_SESSION", "IGNORED_CHECK")
#: The operation types on an object's own chain that move its aggregate.
OBJECT_OP_TYPES = ("INJECTION_EVENT", "FEEDBACK_EVENT", "IGNORED_CHECK")
#: The aggregate values the rollup's aggregate sums read (``feedback.aggregate_sums.Member``).
COUNTED_FIELDS = ("usage_ratio", "total_injections", "unused_sessions", "total_token_cost")
#: Objects per transaction of :func:`rebuild_aggregates`.
OBJECTS_PER_TRANSACTION = 1000


def fold_log(object_ids: set | None = None, progress: Callable[[int], None] | None = None) -> dict:
    """{object_id: Aggregate} folded from the whole log; ``object_ids`` limits what is kept."""
    rows = (
        Operation.objects.filter(op_type__in=OP_TYPES)
        .order_by("seq")
        .values_list("op_type", "target_id", "ts", "payload")
        .iterator(chunk_size=CHUNK)
    )
    return _fold(rows, object_ids, progress)


def _fold(rows, object_ids: set | None, progress: Callable[[int], None] | None = None) -> dict:
    """Fold (op_type, target_id, ts, payload) rows, in ``seq`` order, into aggregates."""
    result: dict = {}

    def agg(object_id) -> aggregates.Aggregate | None:
        if object_ids is not None and object_id not in object_ids:
            return None
        value = result.get(object_id)
        if value is None:
            value = result[object_id] = aggregates.Aggregate()
        return value

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


def _object_log(object_ids: list) -> Iterator[tuple]:
    """(seq, op_type, target_id, ts, payload) of every operation that moves these objects'
    aggregates, in ``seq`` order: their own chains' and their sessions' FEEDBACK_SESSION.

    Streamed, so memory does not grow with the objects' histories: a first pass reads only the
    session ids of their injections, then the two ``seq``-ordered streams (own operations,
    session ends) are merged."""
    fields = ("seq", "op_type", "target_id", "ts", "payload")
    own = Operation.objects.filter(target_id__in=object_ids, op_type__in=OBJECT_OP_TYPES)
    sessions = set()
    every_session = False
    injected = (
        own.filter(op_type="INJECTION_EVENT")
        .values_list(KT("payload__feedback_session_id"), flat=True)
        .iterator(chunk_size=CHUNK)
    )
    for session in injected:
        if session is None:  # a payload written before the field existed: read them all
            every_session = True
            break
        sessions.add(session)
    rows = own.order_by("seq").values_list(*fields).iterator(chunk_size=CHUNK)
    if not (sessions or every_session):
        return rows
    ends = Operation.objects.filter(op_type="FEEDBACK_SESSION")
    if not every_session:
        ends = ends.filter(target_id__in=sorted(sessions))
    ends_rows = ends.order_by("seq").values_list(*fields).iterator(chunk_size=CHUNK)
    return heapq.merge(rows, ends_rows, key=itemgetter(0))


def rebuild_objects(object_ids, namespace=None) -> dict:
    """Rebuild the aggregates of these objects (those of ``namespace`` when given) in one
    transaction, under their row locks (module docstring); ``{"objects", "changed"}``, where
    ``objects`` counts the objects with aggregate-moving operations. Idempotent."""
    with transaction.atomic():
        locked = store.get().lock_objects(object_ids)
        # An object whose log's start is archived (a retention checkpoint) keeps its stored
        # aggregate: the remaining log alone would fold to less than its lifetime values.
        archived = set(
            ChainCheckpoint.objects.filter(target_id__in=list(locked)).values_list(
                "target_id", flat=True
            )
        )
        ns_of = {
            pk: obj.namespace_id
            for pk, obj in locked.items()
            if (namespace is None or obj.namespace_id == namespace.pk) and pk not in archived
        }
        if not ns_of:
            return {"objects": 0, "changed": 0}
        rows = _object_log(list(ns_of))
        folded = _fold((row[1:] for row in rows), set(ns_of))
        changed = _write(folded, ns_of)
    return {"objects": len(folded), "changed": changed}


def rebuild_range(namespace=None, lo=None, hi=None) -> dict:
    """:func:`rebuild_objects` for the objects with ids in ``[lo, hi)`` (one transaction)."""
    objects = MemoryObject.objects.order_by("pk")
    if namespace is not None:
        objects = objects.filter(namespace=namespace)
    if lo is not None:
        objects = objects.filter(pk__gte=lo)
    if hi is not None:
        objects = objects.filter(pk__lt=hi)
    return rebuild_objects(list(objects.values_list("pk", flat=True)), namespace)


def _session_end(payload: dict, ts: datetime, agg) -> None:
    received: dict[str, list[str]] = {}
    for s in payload["signals"]:
        received.setdefault(s["object_id"], []).append(s["signal_type"])
    unused = set(payload["unused_ids"])
    for object_id in payload["injected_object_ids"]:
        a = agg(UUID(object_id))
        if a is None:
            continue
        types = received.get(object_id) or ([policy.UNUSED] if object_id in unused else [])
        aggregates.on_session_end(a, signal_types=types, outcome=payload["outcome"], ts=ts)


def rebuild_aggregates(namespace=None, progress: Callable[[float], None] | None = None) -> dict:
    """Recompute and store every aggregate (of ``namespace``) from the log, in the calling
    process: :func:`rebuild_objects` over OBJECTS_PER_TRANSACTION objects at a time, in key
    order, one transaction each; ``progress(fraction)`` after each. Returns the summed counts.
    Idempotent: a rerun (or a rerun after a crash midway) writes the same values."""
    objects = MemoryObject.objects.order_by("pk")
    if namespace is not None:
        objects = objects.filter(namespace=namespace)
    ids = list(objects.values_list("pk", flat=True))
    total = {"objects": 0, "changed": 0}
    for start in range(0, len(ids), OBJECTS_PER_TRANSACTION):
        part = rebuild_objects(ids[start : start + OBJECTS_PER_TRANSACTION], namespace)
        total = {k: total[k] + part[k] for k in total}
        if progress is not None:
            progress(min(1.0, (start + OBJECTS_PER_TRANSACTION) / len(ids)))
    if progress is not None and not ids:
        progress(1.0)
    return total


def _write(folded: dict, ns_of: dict) -> int:
    """Store the folded aggregates; the number of rows created or changed."""
    live = {a.object_id: a for a in FeedbackAggregate.objects.filter(object_id__in=folded)}
    new, update = [], []
    moved, recount = set(), set()
    for object_id, agg in folded.items():
        row = live.get(object_id)
        ns_id = ns_of.get(object_id) if row is None else row.namespace_id
        if wasteful(None if row is None else row.usage_ratio) != wasteful(agg.usage_ratio):
            moved.add(ns_id)
        if row is None or any(getattr(row, f) != getattr(agg, f) for f in COUNTED_FIELDS):
            recount.add(ns_id)
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
    for start in range(0, len(new), WRITE_BATCH):
        FeedbackAggregate.objects.bulk_create(new[start : start + WRITE_BATCH])
    for start in range(0, len(update), WRITE_BATCH):
        FeedbackAggregate.objects.bulk_update(
            update[start : start + WRITE_BATCH], [*aggregates.FIELDS, "usage_ratio"]
        )
    # An object's waste changed without an injection or a signal, which is how the hourly
    # rollup finds them between runs: its namespace is read live until the next run.
    window_rollup.forget_namespaces(moved)
    # The same for the aggregate sums the rollup counted (feedback.aggregate_sums).
    object_rollup.forget_aggregates(recount)
    return len(new) + len(update)
