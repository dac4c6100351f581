"""The Celery app (``celery -A rms worker`` / ``celery -A rms beat``)."""

import logging
import os
import re

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rms.settings")

app = Celery("rms")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Housekeeping that beat sends every few seconds. At INFO, their "received", "succeeded" and
# "Sending due task" lines would bury every other line (the webhook dispatcher alone writes
# three a second): a pass that found nothing to do is not logged. A pass that did work, and any
# warning or failure, still is.
HOUSEKEEPING_TASKS = frozenset(
    {
        "delivery.tasks.dispatch_webhooks",
        "feedback.tasks.reconcile_task_runs",
        "dashboard.tasks.warm_overview",
        "otlp.tasks.flush_traces",
    }
)
_NON_ZERO = re.compile(r"[1-9]")


class IdleHousekeepingFilter(logging.Filter):
    """Drops the INFO lines of a housekeeping task's idle pass (see HOUSEKEEPING_TASKS): the
    worker's "received" line (its "succeeded" line tells the same), its "succeeded" line when
    the result counts nothing, its "Discarding revoked task" line when the message expired
    (beat's messages expire after their interval, by design), and beat's "Sending due task"."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        args = record.args
        if isinstance(args, dict):  # the worker's lines: {"name": ..., "return_value": ...}
            if args.get("name") not in HOUSEKEEPING_TASKS:
                return True
            result = args.get("return_value")
            return result is not None and _NON_ZERO.search(str(result)) is not None
        if isinstance(args, tuple) and len(args) == 2:
            message = str(record.msg)
            if "Sending due task" in message:  # beat: (entry name, task name)
                return args[1] not in HOUSEKEEPING_TASKS
            if "Discarding revoked task" in message:  # expired, as beat messages do: (name, id)
                return args[0] not in HOUSEKEEPING_TASKS
        return True


_LOGGERS = ("celery.worker.strategy", "celery.worker.request", "celery.app.trace", "celery.beat")
for _name in _LOGGERS:
    logging.getLogger(_name).addFilter(IdleHousekeepingFilter())


@worker_process_shutdown.connect
def _metrics_of_a_dead_child(pid=None, **kwargs) -> None:
    """A prefork child that exits is marked dead in Prometheus' multiprocess folder."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@task_prerun.connect
@task_postrun.connect
def _database_between_tasks(task=None, **kwargs) -> None:
    """Between two tasks, what Django does between two requests: a connection that failed, or
    is older than CONN_MAX_AGE, is closed; a healthy one is kept (and checked before its next
    use, CONN_HEALTH_CHECKS). Celery's own Django fix-up would close every connection around
    every task (CELERY_DB_REUSE_MAX turns that off): a new PostgreSQL backend per fanned-out
    chunk. Eager tasks (called in the caller's process, maybe in its transaction) are left
    alone, as the fix-up leaves them."""
    if task is not None and getattr(task.request, "is_eager", False):
        return
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()
