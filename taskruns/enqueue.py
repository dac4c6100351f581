"""The one door to the worker's tasks: code that queues work calls these functions.

It publishes through the Celery app's registry of tasks, by registered name, and imports no task
module and no service: any service may call it without closing an import circle (the task
modules import the services, so a service importing a task module, even inside a function,
would). Each app's ``AppConfig.ready`` imports its task module, so a name here finds its task
in the web process as in the worker.

Each function publishes at once; call it after commit (``transaction.on_commit``, STYLE §6).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rms.celery import app

logger = logging.getLogger(__name__)

#: One quick retry of a publish, so a broker outage costs a request well under a second.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}

#: The registered names of the tasks queued from outside the worker. They are kept from before
#: the task-runs package existed, so messages already queued and beat entries still find them.
RUN_TASK = "feedback.tasks.run_task"
RUN_CHUNK = "feedback.tasks.run_chunk"
SWEEP_OBJECTS = "feedback.tasks.sweep_objects"
SWEEP_ALL = "feedback.tasks.sweep_all"
SNAPSHOT_METRICS = "feedback.tasks.snapshot_metrics"
RETENTION_PASS = "feedback.tasks.retention_pass"
RETRIEVAL_ROLLUP = "feedback.tasks.retrieval_rollup"
WINDOW_ROLLUP = "feedback.tasks.window_rollup"
RECONCILE_TASK_RUNS = "feedback.tasks.reconcile_task_runs"
COMPUTE_SUPPRESSED = "dashboard.tasks.compute_suppressed"


def publish(name: str, args: tuple, queue: str | None = None) -> None:
    """Publish the registered task ``name`` with ``args`` (JSON values), with one quick retry,
    to ``queue`` (default: the task's route). KeyError when no such task is registered; a broker
    error propagates."""
    options = {"queue": queue} if queue else {}
    task = app.tasks[name]
    task.apply_async(args, retry=True, retry_policy=PUBLISH_RETRY, **options)


def run_task(run_id) -> None:
    """Publish ``run_task`` for a committed TaskRun. A broker error propagates (the caller,
    ``taskruns.runs.send``, logs and counts it; the reconciler sends the run again)."""
    publish(RUN_TASK, (str(run_id),))


def run_chunk(chunk_id, queue: str | None = None) -> None:
    """Publish ``run_chunk`` for a committed chunk of a fanned-out run, to ``queue`` (default:
    the default queue). A broker error propagates (the caller,
    ``taskruns.chunks.send_chunks``, logs and counts it; the reconciler sends the chunk
    again)."""
    publish(RUN_CHUNK, (int(chunk_id),), queue)


def sweep_objects(object_ids: Iterable) -> None:
    """Queue the IGNORED_REPEATEDLY sweep of these objects (SPEC §9) after their sessions commit.

    The periodic sweep catches anything this misses, so nothing here is retried beyond one quick
    publish retry: without the task registered it logs and returns; a broker error propagates to
    ``on_commit``, which ingestion registers with ``robust=True`` so it is logged and the
    committed request still succeeds.
    """
    ids = [str(i) for i in object_ids]
    if not ids:
        return
    if SWEEP_OBJECTS not in app.tasks:
        logger.warning("%s is unavailable; %d object(s) wait", SWEEP_OBJECTS, len(ids))
        return
    publish(SWEEP_OBJECTS, (ids,))


def compute_suppressed(ns_uid: str, salience_below: float, k: int, as_of: str | None) -> None:
    """Queue the scoring of a namespace's suppressed-memories listing (``as_of`` an ISO time or
    None for now). A request calls it outside any transaction (a read); a broker error
    propagates to the caller, which answers from what is stored."""
    publish(COMPUTE_SUPPRESSED, (ns_uid, salience_below, k, as_of))
