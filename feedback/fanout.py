"""Fan-out of the long passes over Celery (issue 17): ``ignored_sweep``, ``rebuild_aggregates``,
``verify_replay`` and ``verify_chain`` run as key-range chunks on whatever workers listen.

The run's task plans: for each table the kind walks, one query returns every
``chunk_size``-th key, and the chunks are the ranges between them, ``[None, b1), [b1, b2), …,
[bn, None)`` (open at both ends, so rows added since the plan are still covered; a table with
at most ``chunk_size`` keys, or none, is one chunk). The chunk rows are written in one
transaction and, after it commits, one ``run_chunk`` message per chunk is published; a message
that cannot be published leaves its chunk unsent, and the reconciler sends it later.

A chunk task claims its chunk by compare-and-swap (queued → running, or running with a stale
heartbeat: its worker died), runs the kind's domain function on its key range, and in the same
transaction stores its result and — when it is the last chunk, under the run's row lock —
the run's merged result. The domain writes, the chunk's result and the run's are therefore
committed together or not at all: a chunk killed midway leaves nothing, its rerun does the whole
chunk again, and the counts of the merged result are those of exactly one execution of each
chunk. A chunk that lost its claim to another worker (its attempt number moved on) rolls back.

Sweep chunks lock their objects and re-check candidacy under the lock (``feedback.sweep``), so
two sweeps over the same objects decide each object once; rebuild chunks lock theirs
(``feedback.rebuild``); verification chunks only read.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from feedback import enqueue, heartbeat, rebuild, sweep, taskruns
from feedback.models import FeedbackSession, TaskChunk, TaskRun
from rms import store, telemetry, verification
from rms.errors import DomainError
from rms.models import MemoryObject, Namespace

logger = logging.getLogger(__name__)

Progress = Callable[[float], None]
#: The hostname recorded for chunks run in the calling process (no worker: tests, direct calls).
LOCAL_HOSTNAME = f"inline@{socket.gethostname()}"


class Superseded(Exception):
    """The chunk was claimed again by another worker while this one ran it: roll back."""


def as_json(value: dict) -> dict:
    """Plain JSON (UUIDs, times and decimals as strings), as the JSON column stores it."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def namespace_of(params: dict) -> Namespace | None:
    name = params.get("namespace")
    if name is None:
        return None
    ns = Namespace.objects.filter(name=name).first()
    if ns is None:  # validated at start, deleted since
        raise DomainError("unknown_namespace", f"Namespace {name!r} no longer exists.")
    return ns


# --- the kinds: what each walks, how a chunk runs, how the results merge ----------------------


@dataclass(frozen=True)
class Kind:
    #: (table, queryset of its rows, key field) for the run's params, in the order they run.
    tables: Callable[[dict], list[tuple[str, QuerySet, str]]]
    #: (params, table, lo, hi, progress, run id) → the chunk's result.
    run: Callable[[dict, str, str | None, str | None, Progress, int], dict]
    #: (the chunks' results in index order, params) → the run's result.
    merge: Callable[[list[dict], dict], dict]


def _sweep_tables(params: dict) -> list:
    return [("memory_object", sweep.candidates(namespace_of(params)), "object_id")]


class _RunContexts(threading.local):
    """The streak sessions' contexts of the sweep run whose chunks this thread runs: the
    chunks of one run share them, as the chunks of a sweep in one process do (a session's tags
    and text never change once recorded; the set stays bounded, ``sweep.SessionContexts``);
    a chunk of another run starts afresh."""

    run_id = None
    contexts: sweep.SessionContexts | None = None

    def of(self, run_id) -> sweep.SessionContexts:
        if self.contexts is None or self.run_id != run_id:
            self.run_id, self.contexts = run_id, sweep.SessionContexts()
        return self.contexts


_run_contexts = _RunContexts()


def _sweep_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    # One inner transaction for the whole chunk (its objects are at most chunk_size at plan
    # time): one lock statement and one set of reads per chunk.
    size = max(sweep.CHUNK, int(params.get("chunk_size") or taskruns.DEFAULT_CHUNK_SIZE))
    result = sweep.sweep(
        namespace=namespace_of(params),
        lo=lo,
        hi=hi,
        chunk_size=size,
        contexts=_run_contexts.of(run_id),
    )
    progress(1.0)
    return result


SWEEP_COUNTS = ("examined", "penalized", "exempt", "not_penalized", "skipped_domain_checks")


def _sweep_merge(parts: list[dict], params: dict) -> dict:
    out = {k: sum(p[k] for p in parts) for k in SWEEP_COUNTS}
    out["namespaces"] = sorted({ns for p in parts for ns in p["namespaces"]})
    return out


def _objects_table(params: dict) -> list:
    ns = namespace_of(params)
    objects = MemoryObject.objects.all()
    if ns is not None:
        objects = objects.filter(namespace=ns)
    return [("memory_object", objects, "pk")]


def _rebuild_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    result = rebuild.rebuild_range(namespace_of(params), lo, hi)
    progress(1.0)
    return result


def _rebuild_merge(parts: list[dict], params: dict) -> dict:
    return {
        "objects": sum(p["objects"] for p in parts),
        "changed": sum(p["changed"] for p in parts),
        "namespace": params.get("namespace"),
    }


def _replay_tables(params: dict) -> list:
    return [(t, *verification.table_keys(t)) for t in verification.REPLAY_TABLES]


def _replay_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    return verification.verify_replay_range(table, lo, hi, progress)


SESSION_TABLE = "feedback_session"


def _chain_tables(params: dict) -> list:
    own = [(t, *verification.table_keys(t)) for t in verification.CHAIN_TABLES]
    return [*own, (SESSION_TABLE, FeedbackSession.objects.all(), "pk")]


def _chain_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    if table != SESSION_TABLE:
        return verification.verify_chain_range(table, lo, hi, progress)
    sessions = FeedbackSession.objects.order_by("pk")
    if lo is not None:
        sessions = sessions.filter(pk__gte=lo)
    if hi is not None:
        sessions = sessions.filter(pk__lt=hi)
    heads = sessions.values_list("pk", "head_hash")
    return verification.verify_chain_heads(heads, SESSION_TABLE, progress)


def _verify_merge(parts: list[dict], params: dict) -> dict:
    """Counts summed; mismatches concatenated in chunk order (the order of one whole pass) up
    to the cap; ``ok`` when no chunk found one."""
    count = sum(p["mismatch_count"] for p in parts)
    listed = [m for p in parts for m in p["mismatches"]][: verification.MAX_LISTED]
    return {
        "ok": count == 0,
        "checked": sum(p["checked"] for p in parts),
        "operations": sum(p["operations"] for p in parts),
        "mismatch_count": count,
        "mismatches": listed,
        "truncated": count > len(listed),
    }


KINDS: dict[str, Kind] = {
    taskruns.IGNORED_SWEEP: Kind(_sweep_tables, _sweep_chunk, _sweep_merge),
    taskruns.REBUILD_AGGREGATES: Kind(_objects_table, _rebuild_chunk, _rebuild_merge),
    taskruns.VERIFY_REPLAY: Kind(_replay_tables, _replay_chunk, _verify_merge),
    taskruns.VERIFY_CHAIN: Kind(_chain_tables, _chain_chunk, _verify_merge),
}
#: The whole-pass duration of the kinds that have one, observed when the run is finalised.
DURATIONS = {
    taskruns.IGNORED_SWEEP: telemetry.SWEEP_DURATION,
    taskruns.REBUILD_AGGREGATES: telemetry.REBUILD_DURATION,
}


# --- planning ------------------------------------------------------------------------------------


def ranges(bounds: list) -> list[tuple]:
    """The key ranges ``[lo, hi)`` between sorted boundaries, open at both ends: n boundaries
    make n + 1 ranges."""
    edges = [None, *bounds, None]
    return list(zip(edges[:-1], edges[1:], strict=True))


def chunk_size_of(params: dict) -> int:
    return int(params.get("chunk_size") or taskruns.DEFAULT_CHUNK_SIZE)


def plan(run: TaskRun, queue: str | None = None, *, send: bool = True) -> list[int]:
    """Cut ``run`` into chunks and write them in one transaction; with ``send``, publish one
    ``run_chunk`` per chunk after the commit (to ``queue``, default: the default queue). Returns
    the chunk ids in index order. Raises DomainError (a namespace deleted since the start)."""
    params = dict(run.params or {})
    size = chunk_size_of(params)
    rows = []
    for table, qs, key in KINDS[run.kind].tables(params):
        for lo, hi in ranges(store.get().key_boundaries(qs, key, size)):
            rows.append(TaskChunk(run=run, index=len(rows), table=table, lo=lo, hi=hi))
    with transaction.atomic():
        TaskChunk.objects.bulk_create(rows)
        ids = list(TaskChunk.objects.filter(run=run).order_by("index").values_list("pk", flat=True))
        if send:
            transaction.on_commit(lambda: send_chunks(ids, queue))
    return ids


def send_chunks(chunk_ids: list[int], queue: str | None = None) -> int:
    """Publish ``run_chunk`` for each chunk and stamp ``sent_at`` on those that went out; stops
    at the first broker error (logged and counted, never raised: the reconciler sends the rest).
    Returns the number sent."""
    sent = []
    for chunk_id in chunk_ids:
        try:
            enqueue.run_chunk(chunk_id, queue)
        except Exception as exc:  # kombu/redis/socket errors: the broker cannot take it now
            telemetry.incr(telemetry.TASK_SEND_FAILURES)
            logger.warning("chunk %s not sent (the reconciler will retry): %s", chunk_id, exc)
            break
        sent.append(chunk_id)
    if sent:
        TaskChunk.objects.filter(pk__in=sent, state=TaskChunk.QUEUED).update(sent_at=timezone.now())
    return len(sent)


# --- running a chunk -----------------------------------------------------------------------------


def claim(chunk_id, hostname: str = LOCAL_HOSTNAME) -> TaskChunk | None:
    """Compare-and-swap → running, for a queued chunk or a running one whose heartbeat stopped,
    of a running run, recording the worker's ``hostname``. None otherwise (finished, unknown,
    alive elsewhere, or its run is over)."""
    now = timezone.now()
    claimable = Q(state=TaskChunk.QUEUED) | Q(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=heartbeat.stale_before()),
        state=TaskChunk.RUNNING,
    )
    claimed = TaskChunk.objects.filter(claimable, pk=chunk_id, run__state=TaskRun.RUNNING).update(
        hostname=hostname, **taskruns.claimed_now(now)
    )
    return TaskChunk.objects.select_related("run").get(pk=chunk_id) if claimed else None


def execute(chunk: TaskChunk, hostname: str, progress: Progress) -> str:
    """Run a claimed chunk and record it, in one transaction (module docstring). Returns the
    run's state afterwards, or the chunk's ``superseded`` when another claim took it over."""
    run = chunk.run
    params = dict(run.params or {})
    try:
        with transaction.atomic():
            kind = KINDS[run.kind]
            result = as_json(kind.run(params, chunk.table, chunk.lo, chunk.hi, progress, run.pk))
            return _complete(chunk, result, hostname)
    except Superseded:
        logger.warning("chunk %s was claimed again meanwhile; this attempt rolled back", chunk.pk)
        return "superseded"


def _complete(chunk: TaskChunk, result: dict, hostname: str) -> str:
    """Inside the chunk's transaction: mark it done and, if it is the last, finalise the run."""
    run = TaskRun.objects.select_for_update().get(pk=chunk.run_id)
    now = timezone.now()
    done = TaskChunk.objects.filter(
        pk=chunk.pk, state=TaskChunk.RUNNING, attempts=chunk.attempts
    ).update(state=TaskChunk.SUCCEEDED, result=result, progress=1.0, hostname=hostname,
             finished_at=now)  # fmt: skip
    if not done:
        raise Superseded()
    if run.state != TaskRun.RUNNING:
        return run.state
    chunks = TaskChunk.objects.filter(run_id=run.pk)
    # Only the last chunk reads the others' results (each reading them all is O(chunks²)).
    if chunks.exclude(state=TaskChunk.SUCCEEDED).exists():
        heartbeat.run_progress_update(run.pk)
        return TaskRun.RUNNING
    rows = list(chunks.order_by("index").values_list("state", "result", "hostname"))
    merged = KINDS[run.kind].merge([r for _, r, _ in rows], dict(run.params or {}))
    merged["chunks"] = len(rows)
    merged["workers"] = sorted({h for _, _, h in rows})
    TaskRun.objects.filter(pk=run.pk).update(
        state=TaskRun.SUCCEEDED, progress=1.0, result=as_json(merged), error="", finished_at=now
    )
    duration = DURATIONS.get(run.kind)
    if duration is not None and run.started_at is not None:
        duration.observe((now - run.started_at).total_seconds())
    return TaskRun.SUCCEEDED


def fail(chunk: TaskChunk, message: str) -> str:
    """The chunk failed for good: so does its run (with the chunk named in the error), and its
    chunks still waiting are marked failed too. Returns ``failed``."""
    now = timezone.now()
    TaskChunk.objects.filter(pk=chunk.pk, state=TaskChunk.RUNNING).update(
        state=TaskChunk.FAILED, error=message[:2000], finished_at=now
    )
    total = TaskChunk.objects.filter(run_id=chunk.run_id).count()
    where = f"Chunk {chunk.index + 1} of {total} ({chunk.table} [{chunk.lo}, {chunk.hi}))"
    TaskRun.objects.filter(pk=chunk.run_id, state=TaskRun.RUNNING).update(
        state=TaskRun.FAILED, error=f"{where}: {message}"[:2000], finished_at=now
    )
    TaskChunk.objects.filter(run_id=chunk.run_id, state=TaskChunk.QUEUED).update(
        state=TaskChunk.FAILED, error="The run failed.", finished_at=now
    )
    return TaskRun.FAILED


def back_to_queue(chunk_id) -> None:
    """Before a retry: the chunk is queued again, so the retry's message claims it at once."""
    TaskChunk.objects.filter(pk=chunk_id, state=TaskChunk.RUNNING).update(
        state=TaskChunk.QUEUED, sent_at=timezone.now()
    )


def pending(run_id) -> list[int]:
    """The run's chunks not yet done, in index order (a rerun in the calling process)."""
    return list(
        TaskChunk.objects.filter(run_id=run_id, state__in=[TaskChunk.QUEUED, TaskChunk.RUNNING])
        .order_by("index")
        .values_list("pk", flat=True)
    )


def has_chunks(run_id) -> bool:
    return TaskChunk.objects.filter(run_id=run_id).exists()


# --- the reconciler's part ----------------------------------------------------------------------


def reconcile(now: datetime, grace: datetime, batch: int) -> dict:
    """Chunks of running runs: a running one whose heartbeat is stale lost its worker and is put
    back to queued (compare-and-swap on its heartbeat); a queued one never sent, or sent more
    than RMS_TASK_RESEND_AFTER s ago and still not claimed, is sent (again), at most ``batch``
    per round. Returns the counts."""
    live_runs = Q(run__state=TaskRun.RUNNING)
    dead = list(
        TaskChunk.objects.filter(live_runs, state=TaskChunk.RUNNING)
        .filter(Q(heartbeat_at__lt=heartbeat.stale_before()) | Q(heartbeat_at__isnull=True))
        .values_list("pk", "heartbeat_at")
    )
    requeued = 0
    for chunk_id, beat in dead:
        if TaskChunk.objects.filter(pk=chunk_id, state=TaskChunk.RUNNING, heartbeat_at=beat).update(
            state=TaskChunk.QUEUED, sent_at=None
        ):
            logger.warning("chunk %s lost its worker (last beat %s); re-queued", chunk_id, beat)
            requeued += 1
    telemetry.incr(telemetry.TASK_RUNS_REQUEUED, amount=requeued)
    resend_before = now - timedelta(seconds=settings.RMS_TASK_RESEND_AFTER)
    waiting = list(
        TaskChunk.objects.filter(live_runs, state=TaskChunk.QUEUED, created_at__lt=grace)
        .filter(Q(sent_at__isnull=True) | Q(sent_at__lt=resend_before))
        .order_by("created_at", "index")
        .values_list("pk", flat=True)[:batch]
    )
    sent = send_chunks(waiting) if waiting else 0
    telemetry.incr(telemetry.TASK_RUNS_RESENT, amount=sent)
    return {"chunks_requeued": requeued, "chunks_sent": sent, "chunks_send_failed": int(
        sent < len(waiting))}  # fmt: skip
