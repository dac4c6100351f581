"""Keeping the overview warm (beat runs it every minute; the cache it fills is shared with the
web processes: Redis, or files under var/ without Redis).

At a million injections the windowed metric sums of the overview take hundreds of milliseconds;
the view caches them for a minute. This task recomputes them ahead for every window and the
histograms of every namespace, so an operator who keeps the overview open never waits for a cold
computation. It does nothing unless the overview was opened in the last 15 minutes, so an
unwatched dashboard costs no database time. Idempotent and read-only: a duplicate or redelivered
message only recomputes the same values.

Proposed beat entry (rms/settings.py)::

    "dashboard-warm-overview": {
        "task": "dashboard.tasks.warm_overview",
        "schedule": 60,
        "options": {"expires": 60},
    },
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from dashboard import selectors
from dashboard.selectors import retrieval
from feedback.selectors import suppressed
from rms.models import Namespace


@shared_task(
    acks_late=True,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
)
def warm_overview() -> int:
    """Recompute the all-namespaces metrics of every window (and the object statistics and
    histograms, and each namespace's retrieval card) while the overview is being watched;
    returns the number of windows warmed."""
    if not cache.get(selectors.VIEWED_KEY):
        return 0
    namespaces = list(Namespace.objects.order_by("name"))
    if not namespaces:
        return 0
    selectors.refresh_object_stats(namespaces)
    for window in selectors.WINDOWS:
        selectors.namespace_health(namespaces, window, refresh=True)
    # The overview's retrieval card of every namespace (the per-day form of its last days).
    now = timezone.now()
    for ns in namespaces:
        retrieval.retrieval_trend(ns, retrieval.OVERVIEW_DAYS, now, refresh=True)
    return len(selectors.WINDOWS)


@shared_task(
    acks_late=True,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
)
def warm_suppressed() -> int:
    """Recompute the suppressed-memories listings asked for in the last 15 minutes (page or
    API) and every namespace's default listing that is missing or idle-old, so a request is
    answered from a stored listing instead of scoring the namespace (seconds at tens of
    thousands of objects); returns how many."""
    return suppressed.warm()


@shared_task(
    acks_late=True,
    soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
    time_limit=settings.CELERY_TASK_TIME_LIMIT,
)
def compute_suppressed(ns_uid: str, salience_below: float, k: int, as_of: str | None) -> bool:
    """Score one suppressed-memories listing a request found missing or stale (``as_of``: ISO
    time, or None for now) and store it for the next request. Idempotent and read-only."""
    at = None if as_of is None else parse_datetime(as_of)
    return suppressed.compute(ns_uid, salience_below, k, at)
