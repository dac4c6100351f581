"""Webhook reads for the API and the dashboard: endpoints with their health, the delivery log."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, Max, Q
from django.utils import timezone

from delivery.models import WebhookDelivery, WebhookEndpoint
from rms.replay import iso

STATS_WINDOW = timedelta(hours=24)


def endpoints_with_stats():
    """Endpoints with their last 24 h: attempted deliveries, successes, pending, last delivery."""
    since = timezone.now() - STATS_WINDOW
    recent = Q(deliveries__last_attempt_at__gte=since)
    return WebhookEndpoint.objects.annotate(
        attempted_24h=Count("deliveries", filter=recent),
        succeeded_24h=Count(
            "deliveries", filter=recent & Q(deliveries__state=WebhookDelivery.SUCCEEDED)
        ),
        pending=Count("deliveries", filter=Q(deliveries__state=WebhookDelivery.PENDING)),
        last_delivery_at=Max("deliveries__last_attempt_at"),
    ).order_by("created_at", "id")


def success_rate(endpoint) -> float | None:
    attempted = getattr(endpoint, "attempted_24h", 0)
    return None if not attempted else endpoint.succeeded_24h / attempted


def endpoint_out(endpoint: WebhookEndpoint) -> dict:
    """An endpoint without its secret (API.md)."""
    out = {
        "id": str(endpoint.pk),
        "url": endpoint.url,
        "description": endpoint.description,
        "namespaces": endpoint.namespaces,
        "event_types": endpoint.event_types,
        "state": endpoint.state,
        "disabled_reason": endpoint.disabled_reason or None,
        "consecutive_failures": endpoint.consecutive_failures,
        "failing_since": iso(endpoint.failing_since),
        "last_success_at": iso(endpoint.last_success_at),
        "last_failure_at": iso(endpoint.last_failure_at),
        "created_at": iso(endpoint.created_at),
    }
    out["success_rate_24h"] = success_rate(endpoint)
    out["pending_deliveries"] = getattr(endpoint, "pending", 0)
    out["last_delivery_at"] = iso(getattr(endpoint, "last_delivery_at", None))
    return out


def deliveries(*, endpoint=None, state=None, event_type=None):
    qs = WebhookDelivery.objects.select_related("endpoint").order_by("-created_at", "-id")
    if endpoint is not None:
        qs = qs.filter(endpoint=endpoint)
    if state:
        qs = qs.filter(state=state)
    if event_type:
        qs = qs.filter(event_type=event_type)
    return qs


def delivery_out(delivery: WebhookDelivery) -> dict:
    return {
        "id": str(delivery.pk),
        "endpoint_id": str(delivery.endpoint_id),
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "attempts": delivery.attempts,
        "state": delivery.state,
        "response_status": delivery.response_status,
        "latency_ms": delivery.latency_ms,
        "next_attempt_at": iso(delivery.next_attempt_at),
        "last_error": delivery.last_error or None,
        "first_attempt_at": iso(delivery.first_attempt_at),
        "last_attempt_at": iso(delivery.last_attempt_at),
        "created_at": iso(delivery.created_at),
    }


def webhook_gauges():
    """Prometheus gauges read at scrape time: endpoints by state, pending deliveries (an
    indexed count: the succeeded ones grow for ever and are left out)."""
    from prometheus_client.core import GaugeMetricFamily

    endpoints = GaugeMetricFamily(
        "rms_webhook_endpoints", "Webhook endpoints, by state.", labels=["state"]
    )
    counts = dict(WebhookEndpoint.objects.values_list("state").annotate(n=Count("id")).order_by())
    for state in WebhookEndpoint.STATES:
        endpoints.add_metric([state], counts.get(state, 0))
    yield endpoints
    yield GaugeMetricFamily(
        "rms_webhook_pending_deliveries",
        "Deliveries waiting for an attempt or a retry.",
        value=WebhookDelivery.objects.filter(state=WebhookDelivery.PENDING).count(),
    )
