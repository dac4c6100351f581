"""Task-run models: runs, the chunks of a fanned-out run, and each worker's heartbeat.

They were ``feedback`` models; their tables keep the names they had there (``db_table``), so the
move is a change of Django's state only (``taskruns/migrations/0001_initial.py``) and no row moves.
"""

from __future__ import annotations

import uuid

from django.db import models


class TaskRun(models.Model):
    """A worker task started from the API or the dashboard, with its state stored here so it
    survives restarts (API.md tasks). Claimed with a compare-and-swap on ``state``."""

    QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
    STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=40)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, default=QUEUED)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    #: When the message for the current attempt reached the broker; null while it has not
    #: (sending failed: the reconciler sends it again).
    sent_at = models.DateTimeField(null=True, blank=True)
    #: Touched by the running attempt every RMS_TASK_HEARTBEAT_EVERY seconds; a running run
    #: whose heartbeat is older than RMS_TASK_HEARTBEAT_TIMEOUT lost its worker.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "feedback_taskrun"
        indexes = [
            models.Index(fields=["kind", "created_at"], name="task_kind_created"),
            models.Index(fields=["state", "created_at"], name="task_state_created"),
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.state}"


class TaskChunk(models.Model):
    """One key range of a fanned-out run: the run's task plans them, one Celery task
    per chunk runs it on any worker, and the chunk that finishes last finalises the run.

    ``[lo, hi)`` bounds the primary keys of ``table`` the chunk walks (text; null is open).
    Claimed with a compare-and-swap on ``state`` like a run; ``attempts`` guards the claim so a
    worker that lost its chunk to another cannot mark it done."""

    QUEUED, RUNNING, SUCCEEDED, FAILED = TaskRun.STATES

    run = models.ForeignKey(
        TaskRun, on_delete=models.CASCADE, related_name="chunks", db_index=False
    )
    index = models.PositiveIntegerField()
    table = models.CharField(max_length=40)
    lo = models.CharField(max_length=64, null=True, blank=True)
    hi = models.CharField(max_length=64, null=True, blank=True)
    state = models.CharField(max_length=10, default=QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    hostname = models.CharField(max_length=200, blank=True, default="")
    progress = models.FloatField(default=0.0)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "feedback_taskchunk"
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="chunk_run_index")]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="chunk_state_beat")]

    def __str__(self) -> str:
        return f"chunk {self.index} of {self.run_id} {self.state}"


class WorkerHeartbeat(models.Model):
    """One row per Celery worker (its node name), touched by the worker's main process every
    RMS_TASK_HEARTBEAT_EVERY seconds: /health reports worker liveness from it."""

    name = models.CharField(max_length=200, primary_key=True)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        db_table = "feedback_workerheartbeat"

    def __str__(self) -> str:
        return f"{self.name} @ {self.seen_at}"
