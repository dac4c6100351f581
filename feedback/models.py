"""Feedback models: per-object aggregates (SPEC §8); sessions and injections follow in issue 3."""

from __future__ import annotations

from django.db import models

from rms.models import MemoryObject, Namespace


class FeedbackAggregate(models.Model):
    """One row per object that has received feedback; kept current on every write (SPEC §8).

    Written only while the object's row lock is held. Rebuildable from the operation log alone.
    """

    object = models.OneToOneField(
        MemoryObject, on_delete=models.CASCADE, primary_key=True, related_name="aggregate"
    )
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    total_injections = models.PositiveIntegerField(default=0)
    total_referenced = models.PositiveIntegerField(default=0)
    total_confirmed = models.PositiveIntegerField(default=0)
    total_task_completed = models.PositiveIntegerField(default=0)
    total_corrected = models.PositiveIntegerField(default=0)
    total_unused = models.PositiveIntegerField(default=0)
    usage_ratio = models.FloatField(null=True, blank=True)
    last_positive_signal = models.DateTimeField(null=True, blank=True)
    last_negative_signal = models.DateTimeField(null=True, blank=True)
    lifetime_gamma_applied = models.FloatField(default=0.0)
    lifetime_delta_applied = models.FloatField(default=0.0)
    unused_streak = models.PositiveIntegerField(default=0)
    utility = models.FloatField(default=0.5)
    uses = models.PositiveIntegerField(default=0)
    last_use_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "usage_ratio"], name="agg_ns_usage"),
            models.Index(fields=["namespace", "unused_streak"], name="agg_ns_streak"),
        ]

    def __str__(self) -> str:
        return f"aggregate of {self.object_id}"
