"""The Celery app (``celery -A rms worker`` / ``celery -A rms beat``)."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rms.settings")

app = Celery("rms")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
