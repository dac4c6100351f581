"""gunicorn hooks of ``make run`` and the compose web service (``-c python:rms.gunicorn_conf``).

Each worker loads the response analyser's tables before it takes requests
(``post_worker_init``), so no request pays for them. With ``PROMETHEUS_MULTIPROC_DIR`` set, every
worker writes its metric samples to files there and ``/metrics`` sums them (``rms.telemetry``);
a worker that exits is marked dead so its live gauges stop counting, while its counters stay
summed.
"""

from __future__ import annotations

import os

#: The longest request line gunicorn takes (its maximum; the default 4094 refused the 100 seeds
#: the contract allows on ``GET /graph/expand``). Longer lines get gunicorn's own 414, answered
#: before Django runs: a list that long belongs in a body (``POST /graph/expand``).
limit_request_line = 8190


def on_starting(server) -> None:
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        os.makedirs(folder, exist_ok=True)


def post_worker_init(worker) -> None:
    from analysis import api as detection

    try:
        detection.warm()
    except Exception:  # a missing table must not stop the worker: the first analysis will say
        worker.log.exception("could not load the response analyser's tables")


def child_exit(server, worker) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
