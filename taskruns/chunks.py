"""Fan-out of the long passes over Celery: the kinds with ``chunks`` in ``taskruns.kinds``
(``ignored_sweep``, ``rebuild_aggregates``, ``verify_replay``, ``verify_chain``) run as key-range
chunks on whatever workers listen.

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
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rms import store, telemetry
from taskruns import enqueue, heartbeat
from taskruns.kinds import DEFAULT_CHUNK_SIZE, KINDS
from taskruns.models import TaskChunk, TaskRun

logger = logging.getLogger(__name__)

Progress = Callable[[float], None]


class Superseded(Exception):
    """The chunk was claimed again by another worker while this one ran it: roll back."""


def as_json(value: dict) -> dict:
    """Plain JSON (UUIDs, times and decimals as strings), as the JSON column stores it."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


# --- planning ------------------------------------------------------------------------------------


def ranges(bounds: list) -> list[tuple]:
    """The key ranges ``[lo, hi)`` between sorted boundaries, open at both ends: n boundaries
    make n + 1 ranges."""
    edges = [None, *bounds, None]
    return list(zip(edges[:-1], edges[1:], strict=True))


def chunk_size_of(params: dict) -> int:
    return int(params.get("chunk_size") or DEFAULT_CHUNK_SIZE)


def plan(run: TaskRun, queue: str | None = None, *, send: bool = True) -> list[int]:
    """Cut ``run`` into chunks and write them in one transaction; with ``send``, publish one
    ``run_chunk`` per chunk after the commit (to ``queue``, default: the default queue). Returns
    the chunk ids in index order. Raises DomainError (a namespace deleted since the start)."""
    params = dict(run.params or {})
    size = chunk_size_of(params)
    rows = []
    for table, qs, key in KINDS[run.kind].chunks.tables(params):
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


def execute(chunk: TaskChunk, hostname: str, progress: Progress) -> str:
    """Run a claimed chunk and record it, in one transaction (module docstring). Returns the
    run's state afterwards, or the chunk's ``superseded`` when another claim took it over."""
    run = chunk.run
    params = dict(run.params or {})
    try:
        with transaction.atomic():
            kind = KINDS[run.kind].chunks
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
    merged = KINDS[run.kind].chunks.merge([r for _, r, _ in rows], dict(run.params or {}))
    merged["chunks"] = len(rows)
    merged["workers"] = sorted({h for _, _, h in rows})
    TaskRun.objects.filter(pk=run.pk).update(
        state=TaskRun.SUCCEEDED, progress=1.0, result=as_json(merged), error="", finished_at=now
    )
    duration = KINDS[run.kind].chunks.duration
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
