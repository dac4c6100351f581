"""Webhook endpoints and their delivery log (API.md "The closed loop").

An endpoint follows the change feed with its own cursor (``cursor_txid``, ``cursor_seq``: a
``rms.events.Position``); the dispatcher turns each matching event into one WebhookDelivery
(unique per endpoint and event, so a replayed page creates nothing twice) and attempts it until
it succeeds or its retry window closes.
"""

from __future__ import annotations

import uuid

from django.db import models


class WebhookEndpoint(models.Model):
    ACTIVE, DISABLED = "active", "disabled"
    STATES = (ACTIVE, DISABLED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    url = models.CharField(max_length=2000)  # checked by delivery.safety, not a form field
    description = models.CharField(max_length=500, blank=True, default="")
    #: Empty means every namespace / every event type.
    namespaces = models.JSONField(default=list, blank=True)
    event_types = models.JSONField(default=list, blank=True)
    # ``whsec_<base64>``: needed in clear to sign. Never rendered by the API after creation, in
    # the admin, in logs or in errors (``__repr__`` and ``__str__`` leave it out).
    secret = models.CharField(max_length=100, editable=False)
    state = models.CharField(max_length=10, default=ACTIVE)
    disabled_reason = models.CharField(max_length=300, blank=True, default="")
    cursor_txid = models.BigIntegerField(default=0)
    cursor_seq = models.BigIntegerField(default=0)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    #: The first failure since the last success (None while healthy).
    failing_since = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    #: After a failure no further attempt is made before this (one backoff per endpoint, so a
    #: dead endpoint costs one timeout per backoff step, not one per queued event).
    blocked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.url} ({self.state})"

    def __repr__(self) -> str:
        return f"<WebhookEndpoint {self.pk} {self.url} {self.state}>"


class WebhookDelivery(models.Model):
    PENDING, SUCCEEDED, FAILED = "pending", "succeeded", "failed"
    STATES = (PENDING, SUCCEEDED, FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    event_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=40)
    #: The event exactly as delivered (the body is its canonical JSON, the same on every retry).
    event = models.JSONField()
    state = models.CharField(max_length=10, default=PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_status = models.IntegerField(null=True, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    #: Retries stop when this passes (24 h after the first attempt, or after a manual retry).
    retry_until = models.DateTimeField(null=True, blank=True)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    #: Claimed by a dispatcher until then (compare-and-swap); expired leases are claimed again.
    lease_until = models.DateTimeField(null=True, blank=True)
    #: The claim that holds the lease: one dispatcher's batch, claimed in one statement.
    claim_token = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "event_id"], name="delivery_once")
        ]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="delivery_due"),
            # The dispatcher's reads every tick, bounded by the work in hand rather than the
            # log's size: due deliveries in claim order, and the leases held.
            models.Index(
                fields=["next_attempt_at", "created_at"],
                name="delivery_pending_order",
                condition=models.Q(state="pending"),
            ),
            models.Index(
                fields=["lease_until"],
                name="delivery_leased",
                condition=models.Q(state="pending", lease_until__isnull=False),
            ),
            models.Index(fields=["endpoint", "created_at"], name="delivery_endpoint_created"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.endpoint_id} ({self.state})"
