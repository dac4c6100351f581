"""The OpenAPI shapes of the webhook API (API.md "The closed loop"), for the schema only: the
views answer plain dicts; ``tests/rms/test_openapi.py`` validates real answers against these."""

from __future__ import annotations

from rest_framework import serializers

from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import events
from rms.api.openapi import NEXT


class WebhookOut(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    namespaces = serializers.ListField(child=serializers.CharField())
    event_types = serializers.ListField(child=serializers.ChoiceField(choices=events.FEED_TYPES))
    state = serializers.ChoiceField(choices=WebhookEndpoint.STATES)
    disabled_reason = serializers.CharField(allow_null=True)
    consecutive_failures = serializers.IntegerField()
    failing_since = serializers.DateTimeField(allow_null=True)
    last_success_at = serializers.DateTimeField(allow_null=True)
    last_failure_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    success_rate_24h = serializers.FloatField(allow_null=True)
    pending_deliveries = serializers.IntegerField()
    last_delivery_at = serializers.DateTimeField(allow_null=True)


class WebhookCreated(WebhookOut):
    secret = serializers.CharField(help_text="`whsec_…`: shown only in this answer.")


class WebhookList(serializers.Serializer):
    results = WebhookOut(many=True)
    next = NEXT


class SecretOut(serializers.Serializer):
    secret = serializers.CharField(help_text="The new `whsec_…` secret; the old one stops now.")


class DeliveryOut(serializers.Serializer):
    id = serializers.UUIDField()
    endpoint_id = serializers.UUIDField()
    event_id = serializers.CharField()
    event_type = serializers.ChoiceField(choices=events.EVENT_TYPES)
    attempts = serializers.IntegerField()
    state = serializers.ChoiceField(choices=WebhookDelivery.STATES)
    response_status = serializers.IntegerField(allow_null=True)
    latency_ms = serializers.FloatField(allow_null=True)
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    first_attempt_at = serializers.DateTimeField(allow_null=True)
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class DeliveryList(serializers.Serializer):
    results = DeliveryOut(many=True)
    next = NEXT
