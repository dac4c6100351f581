"""Heartbeats (issue 15): a running TaskRun's, so the reconciler can tell a run whose worker died
from a long one, and each worker's own, so /health can report worker liveness.

Each beats from a daemon thread on its own database connection, closed when it stops. A run's
heartbeat is an autocommit UPDATE guarded by ``state = running``: it never revives a finished
run, and a run claimed again by another worker just gets fresher beats.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Avg, F, FloatField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from feedback.models import TaskChunk, TaskRun, WorkerHeartbeat
from rms.replay import iso

logger = logging.getLogger(__name__)


def stale_before() -> datetime:
    """A running run or chunk whose heartbeat is older than this lost its worker."""
    return timezone.now() - timedelta(seconds=settings.RMS_TASK_HEARTBEAT_TIMEOUT)


class _Beater:
    """Calls ``beat()`` every ``every`` seconds on a thread until ``stop()``, and at once when
    ``wake()`` is called."""

    def __init__(self, name: str, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def wake(self) -> None:
        self._wake.set()

    def beat(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> _Beater:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait(self.every)
                self._wake.clear()
                stopping = self._stop.is_set()
                try:
                    self.beat()
                except Exception as exc:  # the database is away: beat again next time
                    logger.warning("%s: heartbeat failed: %s", self._thread.name, exc)
                    connection.close()
                if stopping:
                    return
        finally:
            connection.close()


class _ProgressHeartbeat(_Beater):
    """A heartbeat that also stores progress: ``offer(value)`` hands the value over and the
    thread writes it at once, on its own connection, so progress is visible even while the
    domain function is inside a transaction of its own (the rebuild's final write) and the task
    never waits on the write. Subclasses say where it goes (``_write``)."""

    def __init__(self, name: str, every: float | None = None) -> None:
        super().__init__(name, every or settings.RMS_TASK_HEARTBEAT_EVERY)
        self._progress: float | None = None
        self._lock = threading.Lock()

    def offer(self, value: float) -> None:
        with self._lock:
            self._progress = value
        self.wake()

    def beat(self) -> None:
        with self._lock:
            value, self._progress = self._progress, None
        fields = {"heartbeat_at": timezone.now()}
        if value is not None:
            fields["progress"] = value
        self._write(fields)

    def _write(self, fields: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class RunHeartbeat(_ProgressHeartbeat):
    """A running run's heartbeat and progress (an UPDATE guarded by ``state = running``)."""

    def __init__(self, run_id, every: float | None = None) -> None:
        super().__init__(f"heartbeat-{run_id}", every)
        self.run_id = run_id

    def _write(self, fields: dict) -> None:
        TaskRun.objects.filter(pk=self.run_id, state=TaskRun.RUNNING).update(**fields)


class WorkerBeat(_Beater):
    def __init__(self, name: str, every: float | None = None) -> None:
        super().__init__(f"worker-heartbeat-{name}", every or settings.RMS_TASK_HEARTBEAT_EVERY)
        self.name = name
        self.started_at = timezone.now()

    def beat(self) -> None:
        WorkerHeartbeat.objects.update_or_create(
            name=self.name, defaults={"seen_at": timezone.now(), "started_at": self.started_at}
        )


def worker_liveness() -> dict:
    """/health's ``worker``: "ok" when a worker beat within RMS_TASK_HEARTBEAT_TIMEOUT, "stale"
    when the last beat is older, "none" when no worker ever beat; with the newest beat."""
    try:
        now = timezone.now()
        fresh_after = now - timedelta(seconds=settings.RMS_TASK_HEARTBEAT_TIMEOUT)
        rows = list(WorkerHeartbeat.objects.order_by("-seen_at").values_list("seen_at", flat=True))
    except Exception as exc:
        logger.warning("health: worker heartbeats unreadable: %s", exc)
        return {"state": "unknown", "last_heartbeat": None, "alive": None}
    finally:
        connection.close()
    if not rows:
        return {"state": "none", "last_heartbeat": None, "alive": 0}
    alive = sum(1 for seen in rows if seen >= fresh_after)
    return {
        "state": "ok" if alive else "stale",
        "last_heartbeat": iso(rows[0]),
        "age_seconds": round((now - rows[0]).total_seconds(), 1),
        "alive": alive,
    }


class ChunkHeartbeat(_ProgressHeartbeat):
    """A running chunk's heartbeat (issue 17), which also stores its progress and moves its
    run's: the run's progress is the mean of its chunks' (never lower than it was: a chunk
    claimed again starts from 0), and the run's heartbeat is touched too, so a run whose chunks
    are alive is never taken for a lost one."""

    def __init__(self, chunk_id, run_id, every: float | None = None) -> None:
        super().__init__(f"heartbeat-chunk-{chunk_id}", every)
        self.chunk_id = chunk_id
        self.run_id = run_id

    def offer(self, value: float) -> None:
        with self._lock:
            self._progress = value
        if value < 1.0:  # the end (1.0) is written by the chunk's own transaction, with it
            self.wake()

    def beat(self) -> None:
        if self._stop.is_set():
            with self._lock:
                pending = self._progress
            if pending is None or pending >= 1.0:
                # The chunk's task has ended and its transaction recorded the end (state,
                # progress 1.0, the run's progress); a fanned-out run is kept alive by its
                # chunks, not its own beat. Nothing left to say: a short chunk's thread never
                # opens a connection.
                return
        super().beat()

    def _write(self, fields: dict) -> None:
        TaskChunk.objects.filter(pk=self.chunk_id, state=TaskChunk.RUNNING).update(**fields)
        run_progress_update(self.run_id)


def run_progress_update(run_id) -> None:
    """One UPDATE: a fanned-out run's progress ← the mean of its chunks' progress (kept if
    higher), heartbeat ← now; only while the run is running."""
    mean = (
        TaskChunk.objects.filter(run_id=OuterRef("pk"))
        .order_by()
        .values("run_id")
        .annotate(mean=Avg("progress"))
        .values("mean")
    )
    TaskRun.objects.filter(pk=run_id, state=TaskRun.RUNNING).update(
        progress=Greatest(
            F("progress"), Coalesce(Subquery(mean, output_field=FloatField()), Value(0.0))
        ),
        heartbeat_at=timezone.now(),
    )
