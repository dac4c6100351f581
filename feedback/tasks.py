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
- Only named transient database errors are retried, with exponential backoff, at most
  MAX_RETRIES times; anything else fails the run with its message.

Task state lives in the TaskRun table, not in a result backend.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from celery import shared_task, signals
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.db.models import F, Q
from django.utils import timezone

from feedback import alerts, heartbeat, rebuild, selectors, simulations, suite, sweep, taskruns
from feedback.models import FeedbackSession, MetricSnapshot, TaskRun
from rms import telemetry, verification
from rms.errors import DomainError
from rms.models import Namespace, Operation

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
SNAPSHOT_WINDOW_HOURS = 24
#: A queued run younger than this is left to its on_commit send (the reconciler must not race it).
RECONCILE_GRACE = 5  # seconds
#: Runs the reconciler sends per round at most.
RECONCILE_BATCH = 500
SESSION_HEADS_PAGE = 1000

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


# --- the domain function of each kind ---------------------------------------------------------


def _namespace(params: dict) -> Namespace | None:
    name = params.get("namespace")
    if name is None:
        return None
    ns = Namespace.objects.filter(name=name).first()
    if ns is None:  # validated at start, deleted since
        raise DomainError("unknown_namespace", f"Namespace {name!r} no longer exists.")
    return ns


def _ignored_sweep(params: dict, progress: Progress) -> dict:
    with telemetry.SWEEP_DURATION.time():
        return sweep.sweep(namespace=_namespace(params), progress=progress)


def _rebuild_aggregates(params: dict, progress: Progress) -> dict:
    ns = _namespace(params)
    total = Operation.objects.filter(op_type__in=rebuild.OP_TYPES).count()

    def folded(n: int) -> None:
        # The fold is nearly all of the work; the final write takes the last tenth.
        if total:
            progress(0.9 * min(1.0, n / total))

    def written(fraction: float) -> None:
        progress(0.9 + 0.1 * fraction)

    with telemetry.REBUILD_DURATION.time():
        result = rebuild.rebuild_aggregates(ns, progress=folded, written=written)
    return {**result, "namespace": params.get("namespace")}


def _verify_replay(params: dict, progress: Progress) -> dict:
    return verification.verify_replay_all(progress)


def session_heads(page: int = SESSION_HEADS_PAGE) -> Iterator[tuple[uuid.UUID, str]]:
    """(id, head_hash) of every feedback session in primary-key order, a page per query."""
    last = None
    while True:
        qs = FeedbackSession.objects.order_by("pk")
        if last is not None:
            qs = qs.filter(pk__gt=last)
        rows = list(qs.values_list("pk", "head_hash")[:page])
        yield from rows
        if len(rows) < page:
            return
        last = rows[-1][0]


def _verify_chain(params: dict, progress: Progress) -> dict:
    return verification.verify_chain_all(
        progress,
        extra_heads=session_heads(),
        extra_type="feedback_session",
        extra_total=FeedbackSession.objects.count(),
    )


def _stability(params: dict, progress: Progress) -> dict:
    return simulations.stability_simulation(progress=progress, **params)


def _precision(params: dict, progress: Progress) -> dict:
    return simulations.precision_simulation(progress=progress, **params)


def _benchmark(params: dict, progress: Progress) -> dict:
    return suite.benchmark_suite(progress=progress, **params)


def _metric_snapshot(params: dict, progress: Progress) -> dict:
    return take_snapshots(params.get("namespace"))


RUNNERS: dict[str, Callable[[dict, Progress], dict]] = {
    taskruns.IGNORED_SWEEP: _ignored_sweep,
    taskruns.REBUILD_AGGREGATES: _rebuild_aggregates,
    taskruns.VERIFY_REPLAY: _verify_replay,
    taskruns.VERIFY_CHAIN: _verify_chain,
    taskruns.STABILITY_SIMULATION: _stability,
    taskruns.PRECISION_SIMULATION: _precision,
    taskruns.BENCHMARK_SUITE: _benchmark,
    taskruns.METRIC_SNAPSHOT: _metric_snapshot,
}


# --- claiming and finishing a run ---------------------------------------------------------------


def stale_before() -> datetime:
    """A running run whose heartbeat is older than this lost its worker."""
    return timezone.now() - timedelta(seconds=settings.RMS_TASK_HEARTBEAT_TIMEOUT)


def claim(run_id) -> TaskRun | None:
    """Compare-and-swap → running, for a queued run or a running one whose heartbeat stopped
    (its worker died: the message is a redelivery). None when the run is finished, unknown, or
    running with a live heartbeat — a duplicate message (the reconciler re-sent a run that was
    only slow to start) then never runs it twice at once."""
    now = timezone.now()
    claimable = Q(state=TaskRun.QUEUED) | Q(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before()), state=TaskRun.RUNNING
    )
    claimed = TaskRun.objects.filter(claimable, pk=run_id).update(
        state=TaskRun.RUNNING,
        started_at=now,
        heartbeat_at=now,
        finished_at=None,
        progress=0.0,
        error="",
        attempts=F("attempts") + 1,
    )
    return TaskRun.objects.get(pk=run_id) if claimed else None


def _finish(run_id, state: str, **fields) -> None:
    TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
        state=state, finished_at=timezone.now(), **fields
    )


def _fail(run_id, message: str) -> str:
    _finish(run_id, TaskRun.FAILED, error=message[:2000])
    return TaskRun.FAILED


def _json(value: dict) -> dict:
    """Plain JSON (UUIDs, times and decimals as strings), as the JSON column stores it."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


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
    """
    try:
        run_id = uuid.UUID(str(task_id))
    except ValueError:
        logger.error("run_task: malformed task id %r", task_id)
        return None
    run = claim(run_id)
    if run is None:
        return None
    if run.attempts > MAX_ATTEMPTS:
        return _fail(run_id, f"Gave up after {run.attempts - 1} attempts.")
    # Beats while the domain function runs, from a thread on its own connection; not inside a
    # caller's transaction (tests calling the task directly), where the row is not yet visible
    # to another connection and the claim's own heartbeat stands.
    beating = None if connection.in_atomic_block else heartbeat.RunHeartbeat(run_id).start()
    try:
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
    _finish(run_id, TaskRun.SUCCEEDED, progress=1.0, result=result, error="")
    return TaskRun.SUCCEEDED


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


@shared_task(**TASK_OPTIONS)
def sweep_all() -> str | None:
    """Beat: the IGNORED_REPEATEDLY sweep over every namespace, recorded as a TaskRun of kind
    ignored_sweep by "beat", so operators see what the last sweep decided.

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
    run = TaskRun.objects.create(kind=taskruns.IGNORED_SWEEP, params={}, created_by="beat")
    run_task.run(str(run.pk))
    return str(run.pk)


@shared_task(**TASK_OPTIONS)
def snapshot_metrics() -> int:
    """Beat: the metric snapshot of every namespace (``take_snapshots``). Returns the
    snapshots created."""
    return take_snapshots()["snapshots"]


def take_snapshots(namespace: str | None = None) -> dict:
    """One MetricSnapshot per namespace — the four metrics over the trailing 24 h, as
    ``/metrics?since=<now − 24 h>`` computes them — and the alerts it opens or resolves.

    ``ts`` is the minute, so a redelivered or doubled beat message writes nothing new
    (get_or_create on the unique (namespace, ts, window_hours)); alerts are evaluated only by
    the call that created the snapshot, under the namespace's lock (``alerts.alerts_apply``).
    """
    until = timezone.now().replace(second=0, microsecond=0)
    since = until - timedelta(hours=SNAPSHOT_WINDOW_HOURS)
    namespaces = Namespace.objects.order_by("pk")
    if namespace is not None:
        namespaces = namespaces.filter(name=namespace)
    created = raised = resolved = 0
    for ns in namespaces.iterator():
        if MetricSnapshot.objects.filter(
            namespace=ns, ts=until, window_hours=SNAPSHOT_WINDOW_HOURS
        ).exists():
            continue
        evaluated = selectors.namespace_metrics(ns, since, until)
        _, new = MetricSnapshot.objects.get_or_create(
            namespace=ns,
            ts=until,
            window_hours=SNAPSHOT_WINDOW_HOURS,
            defaults={"metrics": evaluated["metrics"], "warnings": evaluated["warnings"]},
        )
        if not new:
            continue
        created += 1
        counts = alerts.alerts_apply(
            namespace_id=ns.pk, evaluated=evaluated["metrics"], window=evaluated["window"], at=until
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
      left alone) and sent. Its attempts count, so a run that kills every worker is given up.

    Idempotent: claims are compare-and-swaps, so a message sent twice runs a run once.
    Returns the counts.
    """
    now = timezone.now()
    grace = now - timedelta(seconds=RECONCILE_GRACE)
    dead = list(
        TaskRun.objects.filter(state=TaskRun.RUNNING)
        .filter(Q(heartbeat_at__lt=stale_before()) | Q(heartbeat_at__isnull=True))
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
    return {"requeued": len(requeued), "sent": sent, "send_failed": failed}


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
