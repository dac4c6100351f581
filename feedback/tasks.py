"""Celery tasks (STYLE §6–§8): thin — ids and JSON in, re-fetch, call one domain function.

The leaf of the import graph: this module imports the domain modules and none of them imports
it; code that queues a task goes through ``feedback.enqueue``.

Delivery is at least once (``acks_late`` with ``reject_on_worker_lost``: a message whose worker
died is delivered again), so every task is idempotent first:

- ``run_task`` claims its TaskRun with a compare-and-swap on ``state``. A run that already
  succeeded or failed is left alone; a ``running`` one is claimed again, because the only way
  a message for a running run arrives is a redelivery after its worker was lost (or a retry).
  Every domain function it calls may be rerun from the start: the sweep examines an object only
  when its streak has grown (SPEC §9), a rebuild writes the same values, verifications and
  simulations write nothing.
- The sweep, the rebuild and the verifications fan out (``feedback.fanout``): ``run_task``
  plans key-range chunks and ``run_chunk`` runs each on any worker, claimed like a run; the
  last chunk finalises the run. Called directly (tests, no worker) ``run_task`` runs the
  chunks one after another in the calling process, through the same ``run_chunk``.
- Only named transient database errors are retried, with exponential backoff, at most
  MAX_RETRIES times; anything else fails the run with its message.

Task state lives in the TaskRun table, not in a result backend.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from celery import shared_task, signals
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from feedback import (
    alerts,
    fanout,
    heartbeat,
    metrics,
    selectors,
    simulations,
    suite,
    sweep,
    taskruns,
)
from feedback.models import MetricSnapshot, TaskChunk, TaskRun
from rms import telemetry
from rms.errors import DomainError
from rms.models import Namespace

logger = logging.getLogger(__name__)

#: Errors worth another try: the database went away or refused for a moment.
TRANSIENT = (OperationalError, InterfaceError)
MAX_RETRIES = 3
RETRY_BACKOFF = 5  # seconds before the first retry; doubled for each further one
#: Claims of one run (first delivery, retries, redeliveries after lost workers) before giving up,
#: so a run that kills its worker every time is not redelivered for ever.
MAX_ATTEMPTS = MAX_RETRIES + 3
#: Progress is written when it moved this much, or this long after the last write (issue 15:
#: at least every 2 % or every second; the domain functions report far more often).
PROGRESS_STEP = 0.02
PROGRESS_INTERVAL = 0.5  # seconds
SNAPSHOT_WINDOW_HOURS = metrics.DEFAULT_WINDOW_HOURS
#: A queued run younger than this is left to its on_commit send (the reconciler must not race it).
RECONCILE_GRACE = 5  # seconds
#: Runs the reconciler sends per round at most.
RECONCILE_BATCH = 500

Progress = Callable[[float], None]

TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": settings.CELERY_TASK_SOFT_TIME_LIMIT,
    "time_limit": settings.CELERY_TASK_TIME_LIMIT,
}


class ProgressWriter:
    """The progress callback handed to a domain function: stores a non-decreasing fraction on
    the run, throttled to a write per PROGRESS_STEP or per PROGRESS_INTERVAL seconds."""

    def __init__(
        self,
        run_id,
        clock: Callable[[], float] = time.monotonic,
        beat: heartbeat.RunHeartbeat | None = None,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.beat = beat
        self.value = 0.0
        self.written_at = clock()
        self.writes = 0

    def __call__(self, fraction: float) -> None:
        value = min(1.0, max(0.0, float(fraction)))
        if value <= self.value:
            return
        now = self.clock()
        # the epsilon: 0.15 - 0.10 is a hair under 0.05 in binary floating point
        moved = value - self.value >= PROGRESS_STEP - 1e-9
        if moved or now - self.written_at >= PROGRESS_INTERVAL:
            self.write(value)
            self.value, self.written_at = value, now

    def write(self, value: float) -> None:
        self.writes += 1
        if self.beat is not None:
            self.beat.offer(value)  # written by the heartbeat thread, on its own connection
            return
        # Without a heartbeat thread (called inside a caller's transaction): on this connection.
        TaskRun.objects.filter(pk=self.run_id, state=TaskRun.RUNNING).update(
            progress=value, heartbeat_at=timezone.now()
        )


class ChunkProgressWriter(ProgressWriter):
    """The progress callback of a chunk: the chunk's own fraction, through its heartbeat thread
    (which also moves the run's mean), or on this connection without one."""

    def __init__(self, chunk: TaskChunk, beat: heartbeat.ChunkHeartbeat | None = None) -> None:
        super().__init__(chunk.run_id, beat=beat)
        self.chunk_id = chunk.pk

    def write(self, value: float) -> None:
        self.writes += 1
        if self.beat is not None:
            self.beat.offer(value)
            return
        TaskChunk.objects.filter(pk=self.chunk_id, state=TaskChunk.RUNNING).update(
            progress=value, heartbeat_at=timezone.now()
        )
        heartbeat.run_progress_update(self.run_id)


# --- the domain function of each kind ---------------------------------------------------------


def _stability(params: dict, progress: Progress) -> dict:
    return simulations.stability_simulation(progress=progress, **params)


def _precision(params: dict, progress: Progress) -> dict:
    return simulations.precision_simulation(progress=progress, **params)


def _benchmark(params: dict, progress: Progress) -> dict:
    return suite.benchmark_suite(progress=progress, **params)


def _metric_snapshot(params: dict, progress: Progress) -> dict:
    return take_snapshots(params.get("namespace"))


#: The kinds that run in one task; the others fan out (``fanout.KINDS``).
RUNNERS: dict[str, Callable[[dict, Progress], dict]] = {
    taskruns.STABILITY_SIMULATION: _stability,
    taskruns.PRECISION_SIMULATION: _precision,
    taskruns.BENCHMARK_SUITE: _benchmark,
    taskruns.METRIC_SNAPSHOT: _metric_snapshot,
}


# --- claiming and finishing a run ---------------------------------------------------------------


stale_before = heartbeat.stale_before


def claim(run_id) -> TaskRun | None:
    """Compare-and-swap → running, for a queued run or a running one whose heartbeat stopped
    (its worker died: the message is a redelivery). None when the run is finished, unknown, or
    running with a live heartbeat — a duplicate message (the reconciler re-sent a run that was
    only slow to start) then never runs it twice at once."""
    now = timezone.now()
    claimable = Q(state=TaskRun.QUEUED) | Q(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before()), state=TaskRun.RUNNING
    )
    claimed = TaskRun.objects.filter(claimable, pk=run_id).update(**taskruns.claimed_now(now))
    return TaskRun.objects.get(pk=run_id) if claimed else None


def _finish(run_id, state: str, **fields) -> None:
    TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
        state=state, finished_at=timezone.now(), **fields
    )


def _fail(run_id, message: str) -> str:
    _finish(run_id, TaskRun.FAILED, error=message[:2000])
    return TaskRun.FAILED


_json = fanout.as_json


def execute(run: TaskRun, beat: heartbeat.RunHeartbeat | None = None) -> dict:
    """Run ``run``'s domain function with a progress callback; its result as plain JSON."""
    runner = RUNNERS.get(run.kind)
    if runner is None:
        raise DomainError("unknown_kind", f"Unknown task kind {run.kind!r}.")
    return _json(runner(dict(run.params or {}), ProgressWriter(run.pk, beat=beat)))


@shared_task(bind=True, max_retries=MAX_RETRIES, **TASK_OPTIONS)
def run_task(self, task_id: str) -> str | None:
    """Run one TaskRun: claim it, call its kind's domain function, store result or error.

    No transaction of its own (each domain function has its own); the claim, progress and the
    final state are single-row autocommit updates guarded by ``state``. Retries OperationalError
    and InterfaceError up to MAX_RETRIES times (backoff 5 s, 10 s, 20 s), then fails the run; a
    soft time limit fails it with "time limit exceeded"; any other error fails it with the
    error's message. Returns the final state, or None when there was nothing to do.

    A fanned-out kind (``fanout.KINDS``) is planned instead: its chunks are written in one
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
    fanned = TaskRun.objects.filter(pk=run_id, kind__in=list(fanout.KINDS)).exists()
    if fanned and fanout.has_chunks(run_id):
        return _run_chunks_here(run_id) if here else None
    run = claim(run_id)
    if run is None:
        return None
    if run.attempts > MAX_ATTEMPTS:
        return _fail(run_id, f"Gave up after {run.attempts - 1} attempts.")
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
            fanout.plan(run, queue, send=not here)
        else:
            result = execute(run, beating)
    except SoftTimeLimitExceeded:
        return _fail(run_id, "time limit exceeded")
    except TRANSIENT as exc:
        if not connection.in_atomic_block:
            close_old_connections()  # drop a connection the error left unusable
        retries = self.request.retries or 0
        # Called directly (sweep_all runs its run inline) there is no message to send again.
        if not self.request.called_directly and retries < self.max_retries:
            logger.warning("run_task %s: transient error, retrying: %s", run_id, exc)
            _back_to_queue(run_id)
            raise self.retry(exc=exc, countdown=RETRY_BACKOFF * 2**retries) from exc
        return _fail(run_id, f"Database error after {retries} retries: {exc}")
    except DomainError as exc:
        return _fail(run_id, exc.message)
    except Exception as exc:
        logger.exception("run_task %s (%s) failed", run_id, run.kind)
        return _fail(run_id, f"{type(exc).__name__}: {exc}")
    finally:
        if beating is not None:
            beating.stop()
    if fanned:
        return _run_chunks_here(run_id) if here else TaskRun.RUNNING
    _finish(run_id, TaskRun.SUCCEEDED, progress=1.0, result=result, error="")
    return TaskRun.SUCCEEDED


def _run_chunks_here(run_id) -> str:
    """The run's pending chunks, one after another in this process (``run_chunk`` called
    directly); the run's state afterwards."""
    for chunk_id in fanout.pending(run_id):
        run_chunk.run(chunk_id)
    return TaskRun.objects.values_list("state", flat=True).get(pk=run_id)


@shared_task(bind=True, max_retries=MAX_RETRIES, **TASK_OPTIONS)
def run_chunk(self, chunk_id: int) -> str | None:
    """Run one chunk of a fanned-out run (``feedback.fanout``): claim it, run the kind's domain
    function on its key range and store the chunk's result — and the run's, for the last chunk
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
    hostname = self.request.hostname or fanout.LOCAL_HOSTNAME
    chunk = fanout.claim(chunk_id, hostname)
    if chunk is None:
        return None
    if chunk.attempts > MAX_ATTEMPTS:
        return fanout.fail(chunk, f"Gave up after {chunk.attempts - 1} attempts.")
    beating = None
    if not connection.in_atomic_block:
        beating = heartbeat.ChunkHeartbeat(chunk.pk, chunk.run_id).start()
    try:
        return fanout.execute(chunk, hostname, ChunkProgressWriter(chunk, beating))
    except SoftTimeLimitExceeded:
        return fanout.fail(chunk, "time limit exceeded")
    except TRANSIENT as exc:
        if not connection.in_atomic_block:
            close_old_connections()
        retries = self.request.retries or 0
        if not self.request.called_directly and retries < self.max_retries:
            logger.warning("run_chunk %s: transient error, retrying: %s", chunk_id, exc)
            try:
                fanout.back_to_queue(chunk_id)
            except TRANSIENT:  # still away: the reconciler re-queues it once its beat is stale
                close_old_connections()
            raise self.retry(exc=exc, countdown=RETRY_BACKOFF * 2**retries) from exc
        return fanout.fail(chunk, f"Database error after {retries} retries: {exc}")
    except DomainError as exc:
        return fanout.fail(chunk, exc.message)
    except Exception as exc:
        logger.exception("run_chunk %s failed", chunk_id)
        return fanout.fail(chunk, f"{type(exc).__name__}: {exc}")
    finally:
        if beating is not None:
            beating.stop()


def _back_to_queue(run_id) -> None:
    """Before a retry: the run is queued again, so the retry's message claims it at once. If
    the database refuses even this, the run stays running and the reconciler re-queues it when
    its heartbeat goes stale."""
    try:
        TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
            state=TaskRun.QUEUED, sent_at=timezone.now()
        )
    except TRANSIENT:
        close_old_connections()


# --- called by other code and by beat ---------------------------------------------------------


@shared_task(
    bind=True, max_retries=MAX_RETRIES, autoretry_for=TRANSIENT, retry_backoff=RETRY_BACKOFF,
    **TASK_OPTIONS,
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
    return _json(sweep.sweep(object_ids=ids))


@shared_task(bind=True, **TASK_OPTIONS)
def sweep_all(self) -> str | None:
    """Beat: the IGNORED_REPEATEDLY sweep over every namespace, recorded as a TaskRun of kind
    ignored_sweep by "beat", so operators see what the last sweep decided. The run is sent like
    one started from the API, so it fans out over every listening worker; called directly it
    runs here (``run_task`` called directly).

    Skipped while another ignored_sweep run is queued or running (a sweep that outlasts the beat
    interval, or a redelivered beat message); a run left unfinished longer than the hard time
    limit belongs to a lost worker and is marked failed. Returns the run's id.
    """
    now = timezone.now()
    unfinished = TaskRun.objects.filter(
        kind=taskruns.IGNORED_SWEEP, state__in=[TaskRun.QUEUED, TaskRun.RUNNING]
    )
    stale_before = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    unfinished.filter(created_at__lt=stale_before).update(
        state=TaskRun.FAILED, finished_at=now, error="The worker running it was lost."
    )
    if unfinished.exists():
        logger.info("sweep_all: an ignored_sweep is already pending; skipped")
        return None
    params = taskruns.validate_params(taskruns.IGNORED_SWEEP, {})
    run = TaskRun.objects.create(kind=taskruns.IGNORED_SWEEP, params=params, created_by="beat")
    if self.request.called_directly:
        run_task.run(str(run.pk))
    else:
        taskruns.send(run.pk)  # not sent: the reconciler sends it
    return str(run.pk)


@shared_task(**TASK_OPTIONS)
def snapshot_metrics() -> int:
    """Beat: the metric snapshot of every namespace (``take_snapshots``). Returns the
    snapshots created."""
    return take_snapshots()["snapshots"]


def take_snapshots(namespace: str | None = None) -> dict:
    """One MetricSnapshot per namespace and minute — the four metrics over the trailing 24 h
    up to now, as ``/metrics?since=<now − 24 h>`` computes them — and the alerts it opens or
    resolves.

    The window ends at the call's own time, not at its minute: a session posted a few seconds
    before the snapshot counts. The snapshot row is keyed by the minute, so a redelivered or
    doubled beat message stores one row (get_or_create on the unique (namespace, ts,
    window_hours)); alerts are evaluated on every call, under the namespace's lock
    (``alerts.alerts_apply``), which writes each crossing once however often it is asked.
    """
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    since = now - timedelta(hours=SNAPSHOT_WINDOW_HOURS)
    namespaces = Namespace.objects.order_by("pk")
    if namespace is not None:
        namespaces = namespaces.filter(name=namespace)
    created = raised = resolved = 0
    for ns in namespaces.iterator():
        evaluated = selectors.namespace_metrics(ns, since, now)
        _, new = MetricSnapshot.objects.get_or_create(
            namespace=ns,
            ts=minute,
            window_hours=SNAPSHOT_WINDOW_HOURS,
            defaults={"metrics": evaluated["metrics"], "warnings": evaluated["warnings"]},
        )
        created += new
        counts = alerts.alerts_apply(
            namespace_id=ns.pk, evaluated=evaluated["metrics"], window=evaluated["window"], at=now
        )
        raised += counts.raised
        resolved += counts.resolved
    return {"snapshots": created, "alerts_raised": raised, "alerts_resolved": resolved}


@shared_task(**TASK_OPTIONS)
def reconcile_task_runs() -> dict:
    """Beat, every RMS_RECONCILE_EVERY s: no task run is lost or stuck (issue 15).

    - a queued run never sent (the broker was down at its commit), or sent more than
      RMS_TASK_RESEND_AFTER s ago and still not started (a broker restarted without its queue),
      is sent (again);
    - a running run whose heartbeat is older than RMS_TASK_HEARTBEAT_TIMEOUT lost its worker: it
      is put back to queued (compare-and-swap on its heartbeat, so a run that beat meanwhile is
      left alone) and sent. Its attempts count, so a run that kills every worker is given up;
    - the chunks of fanned-out runs likewise (``fanout.reconcile``): a chunk whose heartbeat is
      stale is re-queued and re-sent, a queued chunk never sent is sent.

    Idempotent: claims are compare-and-swaps, so a message sent twice runs a run once.
    Returns the counts.
    """
    now = timezone.now()
    grace = now - timedelta(seconds=RECONCILE_GRACE)
    # A fanned-out run with chunks is alive while they are: its chunks are reconciled instead.
    dead = list(
        TaskRun.objects.filter(state=TaskRun.RUNNING)
        .filter(Q(heartbeat_at__lt=stale_before()) | Q(heartbeat_at__isnull=True))
        .filter(~Exists(TaskChunk.objects.filter(run_id=OuterRef("pk"))))
        .values_list("pk", "heartbeat_at")
    )
    requeued = []
    for run_id, beat in dead:
        if TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING, heartbeat_at=beat).update(
            state=TaskRun.QUEUED, sent_at=None
        ):
            logger.warning(
                "task run %s lost its worker (last heartbeat %s); re-queued", run_id, beat
            )
            requeued.append(run_id)
    telemetry.incr(telemetry.TASK_RUNS_REQUEUED, amount=len(requeued))
    resend_before = now - timedelta(seconds=settings.RMS_TASK_RESEND_AFTER)
    waiting = TaskRun.objects.filter(state=TaskRun.QUEUED, created_at__lt=grace).filter(
        Q(sent_at__isnull=True) | Q(sent_at__lt=resend_before)
    )
    sent = failed = 0
    for run_id in list(
        waiting.order_by("created_at").values_list("pk", flat=True)[:RECONCILE_BATCH]
    ):
        if taskruns.send(run_id):
            sent += 1
        else:
            failed += 1
            break  # the broker is still away: the next round tries again
    telemetry.incr(telemetry.TASK_RUNS_RESENT, amount=sent)
    chunks = fanout.reconcile(now, grace, RECONCILE_BATCH)
    return {"requeued": len(requeued), "sent": sent, "send_failed": failed, **chunks}


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
