"""The Celery app (``celery -A rms worker`` / ``celery -A rms beat``)."""

import os

from celery import Celery
from celery.signals import worker_process_shutdown

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
