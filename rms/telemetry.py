"""Process-wide counters of degraded operation (issue 15), named for the Prometheus exporter.

Plain in-process integers under a lock, so the code that degrades (the cache door, the throttle,
task sending, the reconciler, the database-outage answer) counts without a metrics library; the
exporter reads ``snapshot()``. Each gunicorn worker process has its own counts: an exporter that
serves several processes must sum them (or use prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import threading
from collections import Counter

#: A cache operation that failed and was treated as a miss / no-op (label: the operation).
CACHE_ERRORS = "rms_cache_errors_total"
#: A request let through because the throttle could not reach the cache.
THROTTLE_FAILED_OPEN = "rms_throttle_failed_open_total"
#: A task message that could not be sent (the run stays queued for the reconciler).
TASK_SEND_FAILURES = "rms_task_send_failures_total"
#: Queued runs sent again by the reconciler (never sent, or sent and not started for long).
TASK_RUNS_RESENT = "rms_task_runs_resent_total"
#: Running runs whose heartbeat stopped (their worker died), put back in the queue.
TASK_RUNS_REQUEUED = "rms_task_runs_requeued_total"
#: API answers 503 because the database was unreachable.
DATABASE_UNAVAILABLE = "rms_database_unavailable_total"

_lock = threading.Lock()
_counts: Counter[tuple[str, str]] = Counter()


def incr(name: str, label: str = "", amount: int = 1) -> None:
    with _lock:
        _counts[(name, label)] += amount


def value(name: str, label: str | None = None) -> int:
    """The count of ``name`` for one label, or summed over its labels when ``label`` is None."""
    with _lock:
        return sum(n for (k, lab), n in _counts.items() if k == name and label in (None, lab))


def snapshot() -> dict[tuple[str, str], int]:
    """Every (name, label) → count, for an exporter."""
    with _lock:
        return dict(_counts)
