"""Heartbeats and progress: a running TaskRun's, so the reconciler can tell a run whose worker died
from a long one, and each worker's own, so /health can report worker liveness.

Each beats from a daemon thread on its own database connection, closed when it stops. A run's
heartbeat is an autocommit UPDATE guarded by ``state = running``: it never revives a finished
run, and a run claimed again by another worker just gets fresher beats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Avg, F, FloatField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from rms.replay import iso
from taskruns.models import TaskChunk, TaskRun, WorkerHeartbeat

logger = logging.getLogger(__name__)

#: Progress is written when it moved this much, or this long after the last write (at least
#: every 2 % or every second; the services report far more often).
PROGRESS_STEP = 0.02
PROGRESS_INTERVAL = 0.5  # seconds


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
    """A running chunk's heartbeat, which also stores its progress and moves its
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


# --- progress callbacks handed to the services ---------------------------------------------------


class ProgressWriter:
    """The progress callback handed to a domain function: stores a non-decreasing fraction on
    the run, throttled to a write per PROGRESS_STEP or per PROGRESS_INTERVAL seconds."""

    def __init__(
        self,
        run_id,
        clock: Callable[[], float] = time.monotonic,
        beat: RunHeartbeat | None = None,
    ) -> None:
        self.run_id = run_id
        self.clock = clock
        self.beat = beat
        self.value = 0.0
        self.written_at = clock()
        self.writes = 0

    def __call__(self, fraction: float) -> None:
        value = min(1.0, max(0.0, float(fraction)))
        if value <= self.value:
            return
        now = self.clock()
        # the epsilon: 0.15 - 0.10 is a hair under 0.05 in binary floating point
        moved = value - self.value >= PROGRESS_STEP - 1e-9
        if moved or now - self.written_at >= PROGRESS_INTERVAL:
            self.write(value)
            self.value, self.written_at = value, now

    def write(self, value: float) -> None:
        self.writes += 1
        if self.beat is not None:
            self.beat.offer(value)  # written by the heartbeat thread, on its own connection
            return
        # Without a heartbeat thread (called inside a caller's transaction): on this connection.
        TaskRun.objects.filter(pk=self.run_id, state=TaskRun.RUNNING).update(
            progress=value, heartbeat_at=timezone.now()
        )


class ChunkProgressWriter(ProgressWriter):
    """The progress callback of a chunk: the chunk's own fraction, through its heartbeat thread
    (which also moves the run's mean), or on this connection without one."""

    def __init__(self, chunk: TaskChunk, beat: ChunkHeartbeat | None = None) -> None:
        super().__init__(chunk.run_id, beat=beat)
        self.chunk_id = chunk.pk

    def write(self, value: float) -> None:
        self.writes += 1
        if self.beat is not None:
            self.beat.offer(value)
            return
        TaskChunk.objects.filter(pk=self.chunk_id, state=TaskChunk.RUNNING).update(
            progress=value, heartbeat_at=timezone.now()
        )
        run_progress_update(self.run_id)
