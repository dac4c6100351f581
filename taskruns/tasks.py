"""Celery tasks of task runs (STYLE §6–§8): thin — ids and JSON in, re-fetch, call services.

The top of the import graph: this module imports the services and none of them imports it;
code that queues a task goes through ``taskruns.enqueue``, by the registered names
below (``name=``), which are kept from before the task-runs package so messages already queued
and beat entries still find them.

Delivery is at least once (``acks_late`` with ``reject_on_worker_lost``: a message whose worker
died is delivered again), so every task is idempotent first:

- ``run_task`` claims its TaskRun with a compare-and-swap on ``state``. A run that already
  succeeded or failed is left alone; a ``running`` one is claimed again, because the only way
  a message for a running run arrives is a redelivery after its worker was lost (or a retry).
  Every domain function it calls may be rerun from the start: the sweep examines an object only
  when its streak has grown (SPEC §9), a rebuild writes the same values, verifications and
  simulations write nothing.
- The sweep, the rebuild and the verifications fan out (``taskruns.chunks``): ``run_task``
  plans key-range chunks and ``run_chunk`` runs each on any worker, claimed like a run; the
  last chunk finalises the run. Called directly (tests, no worker) ``run_task`` runs the
  chunks one after another in the calling process, through the same ``run_chunk``.
- Only named transient database errors are retried, with exponential backoff, at most
  MAX_RETRIES times; anything else fails the run with its message.

Task state lives in the TaskRun table, not in a result backend.
"""

from __future__ import annotations

import logging
import uuid

from celery import shared_task, signals
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import close_old_connections, connection

from feedback import snapshots, sweep
from rms.errors import DomainError
from taskruns import chunks, claims, enqueue, heartbeat, runs
from taskruns.heartbeat import ChunkProgressWriter
from taskruns.kinds import KINDS
from taskruns.models import TaskRun
from taskruns.runs import TRANSIENT

logger = logging.getLogger(__name__)

MAX_RETRIES = 3
RETRY_BACKOFF = 5  # seconds before the first retry; doubled for each further one
#: Claims of one run (first delivery, retries, redeliveries after lost workers) before giving up,
#: so a run that kills its worker every time is not redelivered for ever.
MAX_ATTEMPTS = MAX_RETRIES + 3

TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": settings.CELERY_TASK_SOFT_TIME_LIMIT,
    "time_limit": settings.CELERY_TASK_TIME_LIMIT,
}


@shared_task(bind=True, name=enqueue.RUN_TASK, max_retries=MAX_RETRIES, **TASK_OPTIONS)
def run_task(self, task_id: str) -> str | None:
    """Run one TaskRun: claim it, call its kind's domain function, store result or error.

    No transaction of its own (each domain function has its own); the claim, progress and the
    final state are single-row autocommit updates guarded by ``state``. Retries OperationalError
    and InterfaceError up to MAX_RETRIES times (backoff 5 s, 10 s, 20 s), then fails the run; a
    soft time limit fails it with "time limit exceeded"; any other error fails it with the
    error's message. Returns the final state, or None when there was nothing to do.

    A fanned-out kind (``chunks`` in ``KINDS``) is planned instead: its chunks are written in one
    transaction and sent after it, and the run stays running until its last chunk finalises
    it. A message for a run that already has chunks (a redelivery) does nothing: its chunks
    carry on, and the reconciler re-sends lost ones. Called directly or eagerly (no worker to
    send chunks to), the chunks run here, one after another, through ``run_chunk``.
    """
    try:
        run_id = uuid.UUID(str(task_id))
    except ValueError:
        logger.error("run_task: malformed task id %r", task_id)
        return None
    here = bool(self.request.called_directly or self.request.is_eager)
    fanned_kinds = [name for name, kind in KINDS.items() if kind.fanned_out]
    fanned = TaskRun.objects.filter(pk=run_id, kind__in=fanned_kinds).exists()
    if fanned and chunks.has_chunks(run_id):
        return _run_chunks_here(run_id) if here else None
    run = claims.run_claim(run_id)
    if run is None:
        return None
    if run.attempts > MAX_ATTEMPTS:
        return runs.fail(run_id, f"Gave up after {run.attempts - 1} attempts.")
    # Beats while the domain function runs, from a thread on its own connection; not inside a
    # caller's transaction (tests calling the task directly), where the row is not yet visible
    # to another connection and the claim's own heartbeat stands. Planning is a few queries:
    # the claim's heartbeat stands for it.
    beating = None
    if not fanned and not connection.in_atomic_block:
        beating = heartbeat.RunHeartbeat(run_id).start()
    try:
        if fanned:
            queue = (self.request.delivery_info or {}).get("routing_key")
            chunks.plan(run, queue, send=not here)
        else:
            result = runs.execute(run, beating)
    except SoftTimeLimitExceeded:
        return runs.fail(run_id, "time limit exceeded")
    except TRANSIENT as exc:
        if not connection.in_atomic_block:
            close_old_connections()  # drop a connection the error left unusable
        retries = self.request.retries or 0
        # Called directly (sweep_all runs its run inline) there is no message to send again.
        if not self.request.called_directly and retries < self.max_retries:
            logger.warning("run_task %s: transient error, retrying: %s", run_id, exc)
            runs.back_to_queue(run_id)
            raise self.retry(exc=exc, countdown=RETRY_BACKOFF * 2**retries) from exc
        return runs.fail(run_id, f"Database error after {retries} retries: {exc}")
    except DomainError as exc:
        return runs.fail(run_id, exc.message)
    except Exception as exc:
        logger.exception("run_task %s (%s) failed", run_id, run.kind)
        return runs.fail(run_id, f"{type(exc).__name__}: {exc}")
    finally:
        if beating is not None:
            beating.stop()
    if fanned:
        return _run_chunks_here(run_id) if here else TaskRun.RUNNING
    runs.finish(run_id, TaskRun.SUCCEEDED, progress=1.0, result=result, error="")
    return TaskRun.SUCCEEDED


def _run_chunks_here(run_id) -> str:
    """The run's pending chunks, one after another in this process (``run_chunk`` called
    directly); the run's state afterwards."""
    for chunk_id in chunks.pending(run_id):
        run_chunk.run(chunk_id)
    return TaskRun.objects.values_list("state", flat=True).get(pk=run_id)


@shared_task(bind=True, name=enqueue.RUN_CHUNK, max_retries=MAX_RETRIES, **TASK_OPTIONS)
def run_chunk(self, chunk_id: int) -> str | None:
    """Run one chunk of a fanned-out run (``chunks``): claim it, run the kind's domain function
    on its key range and store the chunk's result — and the run's, for the last chunk
    — in one transaction.

    Retries OperationalError and InterfaceError up to MAX_RETRIES times (backoff 5 s, 10 s,
    20 s; the chunk goes back to queued meanwhile), then fails the chunk and its run; a soft
    time limit, a domain error or any other error fails them at once, with the chunk named. A
    chunk claimed more than MAX_ATTEMPTS times (it kills its worker) is given up. Returns the
    run's state afterwards, or None when there was nothing to do.
    """
    try:
        chunk_id = int(chunk_id)
    except (TypeError, ValueError):
        logger.error("run_chunk: malformed chunk id %r", chunk_id)
        return None
    hostname = self.request.hostname or claims.LOCAL_HOSTNAME
    chunk = claims.chunk_claim(chunk_id, hostname)
    if chunk is None:
        return None
    if chunk.attempts > MAX_ATTEMPTS:
        return chunks.fail(chunk, f"Gave up after {chunk.attempts - 1} attempts.")
    beating = None
    if not connection.in_atomic_block:
        beating = heartbeat.ChunkHeartbeat(chunk.pk, chunk.run_id).start()
    try:
        return chunks.execute(chunk, hostname, ChunkProgressWriter(chunk, beating))
    except SoftTimeLimitExceeded:
        return chunks.fail(chunk, "time limit exceeded")
    except TRANSIENT as exc:
        if not connection.in_atomic_block:
            close_old_connections()
        retries = self.request.retries or 0
        if not self.request.called_directly and retries < self.max_retries:
            logger.warning("run_chunk %s: transient error, retrying: %s", chunk_id, exc)
            try:
                chunks.back_to_queue(chunk_id)
            except TRANSIENT:  # still away: the reconciler re-queues it once its beat is stale
                close_old_connections()
            raise self.retry(exc=exc, countdown=RETRY_BACKOFF * 2**retries) from exc
        return chunks.fail(chunk, f"Database error after {retries} retries: {exc}")
    except DomainError as exc:
        return chunks.fail(chunk, exc.message)
    except Exception as exc:
        logger.exception("run_chunk %s failed", chunk_id)
        return chunks.fail(chunk, f"{type(exc).__name__}: {exc}")
    finally:
        if beating is not None:
            beating.stop()


# --- called by other code and by beat ---------------------------------------------------------


@shared_task(
    bind=True, name=enqueue.SWEEP_OBJECTS, max_retries=MAX_RETRIES, autoretry_for=TRANSIENT,
    retry_backoff=RETRY_BACKOFF, **TASK_OPTIONS,
)  # fmt: skip
def sweep_objects(self, object_ids: list[str]) -> dict:
    """The IGNORED_REPEATEDLY sweep (SPEC §9) over these objects, after their sessions commit.

    No TaskRun: it runs after every batch of sessions. Idempotent (the sweep examines an object
    only when its streak has grown since its last check); retries transient database errors
    with backoff, at most MAX_RETRIES times.
    """
    ids = []
    for value in object_ids:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            logger.warning("sweep_objects: ignoring malformed object id %r", value)
    if not ids:
        return {}
    return chunks.as_json(sweep.sweep(object_ids=ids))


@shared_task(bind=True, name=enqueue.SWEEP_ALL, **TASK_OPTIONS)
def sweep_all(self) -> str | None:
    """Beat: the IGNORED_REPEATEDLY sweep over every namespace as a TaskRun
    (``runs.sweep_run_start``), sent like one started from the API, so it fans out over every
    listening worker; called directly it runs here (``run_task`` called directly). A run that
    cannot be sent is sent by the reconciler. Returns the run's id, or None when skipped."""
    run = runs.sweep_run_start()
    if run is None:
        return None
    if self.request.called_directly:
        run_task.run(str(run.pk))
    else:
        runs.send(run.pk)
    return str(run.pk)


@shared_task(name=enqueue.SNAPSHOT_METRICS, **TASK_OPTIONS)
def snapshot_metrics() -> int:
    """Beat: the metric snapshot of every namespace (``feedback.snapshots.take_snapshots``).
    Returns the snapshots created."""
    return snapshots.take_snapshots()["snapshots"]


@shared_task(name=enqueue.RETENTION_PASS, **TASK_OPTIONS)
def retention_pass() -> dict:
    """Beat, every RMS_RETENTION_EVERY s: ``feedback.retention.run_all`` (moves what is older
    than each namespace's retention period to the archive). One pass at a time: a pass that
    finds another running (a cache lock) returns at once. Returns the counts."""
    from django.core.cache import cache

    from feedback import retention

    if not cache.add(RETENTION_LOCK, 1, settings.CELERY_TASK_TIME_LIMIT):
        return {"skipped": 1}
    try:
        return retention.run_all()
    finally:
        cache.delete(RETENTION_LOCK)


RETENTION_LOCK = "rms:retention-pass"


@shared_task(name=enqueue.RETRIEVAL_ROLLUP, **TASK_OPTIONS)
def retrieval_rollup() -> dict:
    """Beat, every RMS_RETRIEVAL_ROLLUP_EVERY s: ``feedback.retrieval_rollup.rollup_all`` (the
    retrieval sums of the finished days and hours; recomputes whole units, so idempotent)."""
    from django.utils import timezone

    from feedback import retrieval_rollup

    return retrieval_rollup.rollup_all(timezone.now())


@shared_task(name=enqueue.WINDOW_ROLLUP, **TASK_OPTIONS)
def window_rollup() -> dict:
    """Beat, every RMS_WINDOW_ROLLUP_EVERY s: ``feedback.window_rollup.rollup_all`` (the hourly
    metric sums of the finished hours and the count of every aggregate; recomputes whole hours
    and counts again, so idempotent)."""
    from django.utils import timezone

    from feedback import window_rollup

    return window_rollup.rollup_all(timezone.now())


@shared_task(name=enqueue.RECONCILE_TASK_RUNS, **TASK_OPTIONS)
def reconcile_task_runs() -> dict:
    """Beat, every RMS_RECONCILE_EVERY s: ``runs.reconcile``. Returns its counts."""
    return runs.reconcile()


# --- start-up ----------------------------------------------------------------------------------


@signals.worker_init.connect
def _warm_detection(**kwargs) -> None:
    """The response analyser's tables, loaded once in the worker's main process before its pool
    starts (prefork children inherit them), not by the first task that analyses a session."""
    from analysis import api as detection

    try:
        detection.warm()
    except Exception as exc:
        logger.warning("could not load the response analyser's tables: %s", exc)


# --- the worker's own heartbeat (for /health) ---------------------------------------------------

_worker_beat: heartbeat.WorkerBeat | None = None


@signals.worker_ready.connect
def _start_worker_beat(sender=None, **kwargs) -> None:
    global _worker_beat
    name = getattr(sender, "hostname", None) or "worker"
    _worker_beat = heartbeat.WorkerBeat(name)
    try:
        _worker_beat.beat()  # at once, so /health sees a worker as soon as it is ready
    except Exception as exc:
        logger.warning("worker heartbeat: %s", exc)
    finally:
        connection.close()
    _worker_beat.start()


@signals.worker_shutdown.connect
def _stop_worker_beat(**kwargs) -> None:
    if _worker_beat is not None:
        _worker_beat.stop()
