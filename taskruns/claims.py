"""Claims: the compare-and-swap that hands a run or a chunk to one worker (STYLE §7).

A queued one is claimable, and so is a running one whose heartbeat stopped (its worker died:
the message is a redelivery). One with a live heartbeat is not, so a duplicate message (the
reconciler re-sent a run that was only slow to start) never runs it twice at once.
"""

from __future__ import annotations

import socket

from django.db.models import F, Q
from django.utils import timezone

from taskruns.heartbeat import stale_before
from taskruns.models import TaskChunk, TaskRun

#: The hostname recorded for chunks run in the calling process (no worker: tests, direct calls).
LOCAL_HOSTNAME = f"inline@{socket.gethostname()}"


def claimed_now(now) -> dict:
    """The fields a worker sets when it claims a run or a chunk (``TaskRun``, ``TaskChunk``):
    running from ``now``, no progress, no error, one attempt more."""
    return {
        "state": TaskRun.RUNNING,
        "started_at": now,
        "heartbeat_at": now,
        "finished_at": None,
        "progress": 0.0,
        "error": "",
        "attempts": F("attempts") + 1,
    }


def _claimable() -> Q:
    return Q(state=TaskRun.QUEUED) | Q(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=stale_before()), state=TaskRun.RUNNING
    )


def run_claim(run_id) -> TaskRun | None:
    """Claim a run. None when the run is finished, unknown, or running with a live heartbeat."""
    claimed = TaskRun.objects.filter(_claimable(), pk=run_id).update(**claimed_now(timezone.now()))
    return TaskRun.objects.get(pk=run_id) if claimed else None


def chunk_claim(chunk_id, hostname: str = LOCAL_HOSTNAME) -> TaskChunk | None:
    """Claim a chunk of a running run, recording the worker's ``hostname``. None otherwise
    (finished, unknown, alive elsewhere, or its run is over)."""
    claimed = TaskChunk.objects.filter(
        _claimable(), pk=chunk_id, run__state=TaskRun.RUNNING
    ).update(hostname=hostname, **claimed_now(timezone.now()))
    return TaskChunk.objects.select_related("run").get(pk=chunk_id) if claimed else None
