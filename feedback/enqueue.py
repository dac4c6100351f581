"""The one door to the feedback worker's tasks: code that queues work calls these functions.

``feedback.tasks`` sits at the leaf of the import graph: it imports the domain modules, and no
domain module imports it. Only the functions below reach it, and only when they are called (the
import inside each is deliberate), so a service never loads Celery task definitions to enqueue
and no module needs a lazy import to break a circle.

Each function publishes at once; call it after commit (``transaction.on_commit``, STYLE §6).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

logger = logging.getLogger(__name__)

#: One quick retry of a publish, so a broker outage costs a request well under a second.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


def run_task(run_id) -> None:
    """Publish ``run_task`` for a committed TaskRun. A broker error propagates (the caller,
    ``feedback.taskruns.send``, logs and counts it; the reconciler sends the run again)."""
    from feedback.tasks import run_task as task

    task.apply_async((str(run_id),), retry=True, retry_policy=PUBLISH_RETRY)


def run_chunk(chunk_id, queue: str | None = None) -> None:
    """Publish ``run_chunk`` for a committed chunk of a fanned-out run (``feedback.fanout``), to
    ``queue`` (default: the default queue). A broker error propagates (the caller,
    ``feedback.fanout.send_chunks``, logs and counts it; the reconciler sends the chunk again)."""
    from feedback.tasks import run_chunk as task

    options = {"queue": queue} if queue else {}
    task.apply_async((int(chunk_id),), retry=True, retry_policy=PUBLISH_RETRY, **options)


def sweep_objects(object_ids: Iterable) -> None:
    """Queue the IGNORED_REPEATEDLY sweep of these objects (SPEC §9) after their sessions commit.

    The periodic sweep catches anything this misses, so nothing here is retried beyond one quick
    publish retry: without the task module it logs and returns; a broker error propagates to
    ``on_commit``, which ingestion registers with ``robust=True`` so it is logged and the
    committed request still succeeds.
    """
    ids = [str(i) for i in object_ids]
    if not ids:
        return
    try:
        from feedback.tasks import sweep_objects as task
    except ImportError:
        logger.warning("feedback.tasks.sweep_objects is unavailable; %d object(s) wait", len(ids))
        return
    task.apply_async((ids,), retry=True, retry_policy=PUBLISH_RETRY)
