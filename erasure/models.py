"""Erasure requests and their receipts (API.md ``/erasures``; docs/DECISIONS.md "Erasure")."""

from __future__ import annotations

import uuid

from django.db import models


class Erasure(models.Model):
    """One erasure: what it erases, where, who asked, and how far it got.

    ``pending_subject`` holds the raw subject id only until the erasure commits (the worker
    needs it); the receipt then keeps the id as the log does (an actor's pseudonym).
    """

    QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"
    KINDS = ("object", "actor", "session", "namespace")

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.ForeignKey("rms.Namespace", on_delete=models.PROTECT, related_name="+")
    subject_kind = models.CharField(max_length=16)
    subject_id = models.CharField(max_length=200)
    pending_subject = models.CharField(max_length=200, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    requested_by = models.CharField(max_length=150)
    state = models.CharField(max_length=10, default=QUEUED)
    message = models.CharField(max_length=300, blank=True, default="")
    counts = models.JSONField(default=dict, blank=True)
    operation_id = models.UUIDField(null=True, blank=True)
    task_id = models.UUIDField(null=True, blank=True)
    requested_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-requested_at"]
        indexes = [models.Index(fields=["namespace", "requested_at"], name="erasure_ns_at")]

    def __str__(self) -> str:
        return f"erasure {self.subject_kind} {self.subject_id} ({self.state})"
