"""gunicorn hooks of ``make run`` and the compose web service (``-c python:rms.gunicorn_conf``).

With ``PROMETHEUS_MULTIPROC_DIR`` set, every worker writes its metric samples to files there and
``/metrics`` sums them (``rms.telemetry``); a worker that exits is marked dead so its live
gauges stop counting, while its counters stay summed.
"""

from __future__ import annotations

import os


def on_starting(server) -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)


def child_exit(server, worker) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
