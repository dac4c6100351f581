"""Task runs (API.md tasks): starting one, running a kind that runs in one task, finishing,
and the reconciler that sees no run or chunk is lost or stuck.

``task_start`` validates everything a caller can get wrong before anything is written (the
rules are the kinds', ``taskruns.kinds``); the run is enqueued only after its row is
committed (STYLE §6), so the worker always finds it. Task state lives in the TaskRun table, not
in a result backend.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from rms import telemetry
from rms.errors import DomainError
from rms.models import ApiClient
from rms.replay import iso
from taskruns import chunks, enqueue, kinds
from taskruns.heartbeat import ProgressWriter, RunHeartbeat, stale_before
from taskruns.models import TaskChunk, TaskRun

logger = logging.getLogger(__name__)

#: Errors worth another try: the database went away or refused for a moment.
TRANSIENT = (OperationalError, InterfaceError)
#: A queued run younger than this is left to its on_commit send (the reconciler must not race it).
RECONCILE_GRACE = 5  # seconds
#: Runs the reconciler sends per round at most.
RECONCILE_BATCH = 500


# --- starting a run ------------------------------------------------------------------------------


def task_start(*, client: ApiClient, kind: Any, params: Any) -> TaskRun:
    """Validate, create a queued TaskRun and send ``run_task`` after the commit.

    One transaction; the message is sent from ``on_commit``, so a rolled-back start sends
    nothing and a worker never sees a run that is not yet visible. Raises DomainError (400) or
    Forbidden (403) before writing anything. A broker that cannot take the message does not
    fail the call: the run stays queued, unsent, and beat's reconciler sends it once the broker
    is back (``send``), so the caller always gets the run's id.
    """
    kinds.check_kind(client, kind)
    clean = kinds.validate_params(kind, params)
    with transaction.atomic():
        run = TaskRun.objects.create(kind=kind, params=clean, created_by=client.name)
        send_on_commit(run)
    return run


def send_on_commit(run: TaskRun) -> None:
    """Send ``run_task`` for ``run`` once the current transaction commits."""
    run_id = run.pk
    transaction.on_commit(lambda: send(run_id))


def send_failed(run_id) -> bool:
    """True when the run's message was tried after its commit and the broker refused it (it
    waits for the reconciler). False while the caller is still inside a transaction: then
    nothing was tried yet."""
    if transaction.get_connection().in_atomic_block:
        return False
    return TaskRun.objects.filter(pk=run_id, state=TaskRun.QUEUED, sent_at__isnull=True).exists()


def send(run_id) -> bool:
    """Publish ``run_task`` for a committed run and stamp ``sent_at``; False (logged and
    counted, never raised) when the broker is unreachable."""
    try:
        enqueue.run_task(run_id)
    except Exception as exc:  # kombu/redis/socket errors: the broker cannot take it now
        telemetry.incr(telemetry.TASK_SEND_FAILURES)
        logger.warning("task run %s not sent (the reconciler will retry): %s", run_id, exc)
        return False
    TaskRun.objects.filter(pk=run_id, state=TaskRun.QUEUED).update(sent_at=timezone.now())
    return True


def task_out(run: TaskRun) -> dict:
    return {
        "id": str(run.pk),
        "kind": run.kind,
        "state": run.state,
        "progress": run.progress,
        "result": run.result,
        "error": run.error or None,
        "params": run.params,
        "created_by": run.created_by,
        "attempts": run.attempts,
        "sent": run.sent_at is not None,
        "heartbeat_at": iso(run.heartbeat_at),
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
    }


# --- running a kind that runs in one task -------------------------------------------------------


def execute(run: TaskRun, beat: RunHeartbeat | None = None) -> dict:
    """Run ``run``'s service (a kind that runs in one task) with a progress callback; its
    result as plain JSON."""
    kind = kinds.KINDS.get(run.kind)
    if kind is None or kind.run is None:
        raise DomainError("unknown_kind", f"Unknown task kind {run.kind!r}.")
    return chunks.as_json(kind.run(dict(run.params or {}), ProgressWriter(run.pk, beat=beat)))


def finish(run_id, state: str, **fields) -> None:
    TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
        state=state, finished_at=timezone.now(), **fields
    )


def fail(run_id, message: str) -> str:
    finish(run_id, TaskRun.FAILED, error=message[:2000])
    return TaskRun.FAILED


def back_to_queue(run_id) -> None:
    """Before a retry: the run is queued again, so the retry's message claims it at once. If
    the database refuses even this, the run stays running and the reconciler re-queues it when
    its heartbeat goes stale."""
    try:
        TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
            state=TaskRun.QUEUED, sent_at=timezone.now()
        )
    except TRANSIENT:
        close_old_connections()


# --- beat ---------------------------------------------------------------------------------------


def sweep_run_start() -> TaskRun | None:
    """The IGNORED_REPEATEDLY sweep over every namespace, as a queued TaskRun of kind
    ignored_sweep by "beat", so operators see what the last sweep decided. The caller sends it
    (``send``) or runs it in its own process.

    Skipped while another ignored_sweep run is queued or running (a sweep that outlasts the beat
    interval, or a redelivered beat message); a run left unfinished longer than the hard time
    limit belongs to a lost worker and is marked failed. Returns the run, or None when skipped.
    Single-row autocommit writes, no transaction of its own.
    """
    now = timezone.now()
    unfinished = TaskRun.objects.filter(
        kind=kinds.IGNORED_SWEEP, state__in=[TaskRun.QUEUED, TaskRun.RUNNING]
    )
    lost_before = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    unfinished.filter(created_at__lt=lost_before).update(
        state=TaskRun.FAILED, finished_at=now, error="The worker running it was lost."
    )
    if unfinished.exists():
        logger.info("sweep_all: an ignored_sweep is already pending; skipped")
        return None
    params = kinds.validate_params(kinds.IGNORED_SWEEP, {})
    return TaskRun.objects.create(kind=kinds.IGNORED_SWEEP, params=params, created_by="beat")


def reconcile() -> dict:
    """Every RMS_RECONCILE_EVERY s (beat): no task run is lost or stuck.

    - a queued run never sent (the broker was down at its commit), or sent more than
      RMS_TASK_RESEND_AFTER s ago and still not started (a broker restarted without its queue),
      is sent (again);
    - a running run whose heartbeat is older than RMS_TASK_HEARTBEAT_TIMEOUT lost its worker: it
      is put back to queued (compare-and-swap on its heartbeat, so a run that beat meanwhile is
      left alone) and sent. Its attempts count, so a run that kills every worker is given up;
    - the chunks of fanned-out runs likewise (``chunks.reconcile``): a chunk whose heartbeat is
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
        if send(run_id):
            sent += 1
        else:
            failed += 1
            break  # the broker is still away: the next round tries again
    telemetry.incr(telemetry.TASK_RUNS_RESENT, amount=sent)
    chunked = chunks.reconcile(now, grace, RECONCILE_BATCH)
    return {"requeued": len(requeued), "sent": sent, "send_failed": failed, **chunked}
