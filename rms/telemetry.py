"""Prometheus telemetry: every metric object of the service lives here.

``GET /metrics`` (``rms.api.views.PrometheusView``) renders them in the text exposition format.
Counters and histograms are written where things happen (the request middleware, ingestion,
the worker's sweeps and rebuilds); gauges that describe stored state (task runs, queue depth)
are read at scrape time by :class:`StateCollector`, so they are right whichever process serves
the scrape.

Several processes (gunicorn workers, the Celery worker): with ``PROMETHEUS_MULTIPROC_DIR`` set,
prometheus_client's multiprocess mode keeps each process's samples in files there and a scrape
sums them; the folder must be emptied before the processes start. Without it every process
counts for itself (one web process, as under ``runserver`` or the tests).

Webhook deliveries add their metrics here, beside the others.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator

from amqp.exceptions import ChannelError
from django.db import DatabaseError
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import REGISTRY, GaugeMetricFamily, Metric

logger = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

REQUEST_LATENCY = Histogram(
    "rms_http_request_duration_seconds",
    "Time to answer an HTTP request, by route name, method and status.",
    ["endpoint", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
SESSIONS_INGESTED = Counter(
    "rms_sessions_ingested",
    "Feedback sessions recorded (new ones: 201, alone or in a batch).",
)
SIGNALS_INGESTED = Counter(
    "rms_signals_ingested",
    "Signals recorded: POST /objects/{id}/signals (source=endpoint) and the signals of new "
    "feedback sessions (source=session).",
    ["source"],
)
BATCH_ITEMS = Counter(
    "rms_batch_items",
    "Items of POST /feedback-sessions/batch, by the status of their answer.",
    ["status"],
)
SWEEP_DURATION = Histogram(
    "rms_sweep_duration_seconds",
    "Duration of an IGNORED_REPEATEDLY sweep (the ignored_sweep task or the beat's).",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600),
)
REBUILD_DURATION = Histogram(
    "rms_rebuild_duration_seconds",
    "Duration of a rebuild_aggregates run.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600),
)
WEBHOOK_ATTEMPTS = Counter(
    "rms_webhook_attempts",
    "Webhook delivery attempts, by outcome: succeeded (a 2xx), http_error (another status), "
    "unreachable (timeout, refused connection, refused address).",
    ["outcome"],
)
WEBHOOK_LATENCY = Histogram(
    "rms_webhook_latency_seconds",
    "Time for a webhook endpoint to answer an attempt.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def queue_depth() -> float | None:
    """Messages waiting in the Celery broker's default queue; None when it cannot be read
    (the broker down, or the embedded filesystem broker's folder missing)."""
    from django.conf import settings

    try:
        if settings.CELERY_BROKER_IS_EMBEDDED:
            folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
            return float(sum(1 for name in os.listdir(folder) if name.endswith(".msg")))
        from rms.celery import app

        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=0.5)
            with conn.channel() as channel:
                try:
                    _, count, _ = channel.queue_declare(
                        queue=app.conf.task_default_queue, passive=True
                    )
                except ChannelError:  # Redis: no list (nothing queued yet) is "no such queue"
                    return 0.0
                return float(count)
    except Exception:  # any broker error: the gauge is absent, the scrape still answers
        logger.warning("metrics: the broker's queue depth could not be read", exc_info=True)
        return None


#: Functions returning gauge families read at scrape time; apps built on ``rms`` add theirs
#: (``feedback`` its task runs) from ``AppConfig.ready`` — ``rms`` never imports them.
_state_readers: list[Callable[[], Iterable[Metric]]] = []


def register_state_reader(reader: Callable[[], Iterable[Metric]]) -> None:
    if reader not in _state_readers:
        _state_readers.append(reader)


class StateCollector:
    """Gauges read at scrape time: the registered readers' and the queue depth."""

    def describe(self) -> list:
        return []  # read the database only when scraped, never at registration

    def collect(self) -> Iterator[Metric]:
        for reader in _state_readers:
            try:
                families = list(reader())
            except DatabaseError:  # the database down: these gauges are absent, no 500
                logger.warning("metrics: %s could not be read", reader.__name__, exc_info=True)
                continue
            yield from families
        depth = queue_depth()
        if depth is not None:
            yield GaugeMetricFamily(
                "rms_queue_depth", "Messages waiting in the broker's default queue.", value=depth
            )


_STATE = StateCollector()
if not multiprocess_dir():
    REGISTRY.register(_STATE)


def exposition() -> bytes:
    """The text exposition of every metric: all processes' samples in multiprocess mode."""
    if not multiprocess_dir():
        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(_STATE)
    return generate_latest(registry)


# --- degraded operation (the cache, the throttle, task sending, the database) -------------------
# The code that degrades counts through ``incr`` with these names; each is a Prometheus counter
# with one ``label`` (the cache operation, for instance), exported like every metric above.

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

_DEGRADED: dict[str, Counter] = {
    name: Counter(name.removesuffix("_total"), doc, ["label"])
    for name, doc in (
        (CACHE_ERRORS, "Cache operations that failed and were treated as a miss or a no-op."),
        (THROTTLE_FAILED_OPEN, "Requests let through because the throttle's cache was down."),
        (TASK_SEND_FAILURES, "Task messages that could not be sent (the run stays queued)."),
        (TASK_RUNS_RESENT, "Queued task runs sent again by the reconciler."),
        (TASK_RUNS_REQUEUED, "Running task runs whose worker died, put back in the queue."),
        (DATABASE_UNAVAILABLE, "API answers 503 because the database was unreachable."),
    )
}


def incr(name: str, label: str = "", amount: int = 1) -> None:
    if amount:
        _DEGRADED[name].labels(label).inc(amount)


def value(name: str, label: str | None = None) -> int:
    """This process's count of ``name`` for one label, or summed over its labels."""
    total = 0.0
    for family in _DEGRADED[name].collect():
        for sample in family.samples:
            if sample.name == name and label in (None, sample.labels.get("label")):
                total += sample.value
    return int(total)


def snapshot() -> dict[tuple[str, str], int]:
    """Every (name, label) → this process's count."""
    out: dict[tuple[str, str], int] = {}
    for name, counter in _DEGRADED.items():
        for family in counter.collect():
            for sample in family.samples:
                if sample.name == name:
                    out[(name, sample.labels["label"])] = int(sample.value)
    return out
