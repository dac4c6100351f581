"""delivery.selectors: endpoints with their last 24 hours, the delivery log's filters and
shapes, and the Prometheus gauges — read from the real database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery import selectors, services
from delivery.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint(settings, namespace):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    made, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:9/hook")
    return made


def delivery(endpoint, state, *, hours_ago=None, event_type="webhook.test", **kw):
    at = None if hours_ago is None else timezone.now() - timedelta(hours=hours_ago)
    return WebhookDelivery.objects.create(
        endpoint=endpoint,
        event_id=f"evt-{WebhookDelivery.objects.count()}",
        event_type=event_type,
        event={},
        state=state,
        last_attempt_at=at,
        **kw,
    )


def test_stats_count_the_last_24_hours_and_every_pending_delivery(endpoint):
    S, P, F = WebhookDelivery.SUCCEEDED, WebhookDelivery.PENDING, WebhookDelivery.FAILED
    delivery(endpoint, S, hours_ago=1)
    delivery(endpoint, S, hours_ago=2)
    delivery(endpoint, F, hours_ago=3)
    delivery(endpoint, P, hours_ago=4)
    delivery(endpoint, S, hours_ago=30)  # outside the window
    delivery(endpoint, P)  # never attempted
    (found,) = selectors.endpoints_with_stats()
    assert (found.attempted_24h, found.succeeded_24h, found.pending) == (4, 2, 2)
    assert selectors.success_rate(found) == 0.5
    out = selectors.endpoint_out(found)
    assert out["success_rate_24h"] == 0.5 and out["pending_deliveries"] == 2
    newest = max(d.last_attempt_at for d in WebhookDelivery.objects.exclude(last_attempt_at=None))
    assert out["last_delivery_at"] == newest.isoformat()


def test_an_endpoint_without_attempts_has_no_success_rate(endpoint):
    (found,) = selectors.endpoints_with_stats()
    assert selectors.success_rate(found) is None
    out = selectors.endpoint_out(found)
    assert out["success_rate_24h"] is None and out["last_delivery_at"] is None
    assert selectors.success_rate(endpoint) is None  # an endpoint read without its stats


def test_an_endpoint_is_shown_without_its_secret(endpoint):
    out = selectors.endpoint_out(endpoint)
    assert "secret" not in out and endpoint.secret not in repr(out)
    assert out["id"] == str(endpoint.pk) and out["state"] == "active"
    assert out["disabled_reason"] is None and out["failing_since"] is None


def test_endpoints_are_listed_oldest_first(endpoint):
    second, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:10/hook")
    assert [e.pk for e in selectors.endpoints_with_stats()] == [endpoint.pk, second.pk]


def test_the_delivery_log_is_newest_first_and_filters_by_endpoint_state_and_type(endpoint):
    other, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:10/hook")
    a = delivery(endpoint, WebhookDelivery.SUCCEEDED, event_type="object.created")
    b = delivery(endpoint, WebhookDelivery.FAILED, event_type="object.updated")
    c = delivery(other, WebhookDelivery.FAILED, event_type="object.created")
    assert list(selectors.deliveries()) == [c, b, a]
    assert list(selectors.deliveries(endpoint=endpoint)) == [b, a]
    assert list(selectors.deliveries(state=WebhookDelivery.FAILED)) == [c, b]
    assert list(selectors.deliveries(event_type="object.created")) == [c, a]
    assert (
        list(selectors.deliveries(endpoint=endpoint, state="failed", event_type="object.created"))
        == []
    )


def test_a_delivery_is_shown_with_its_attempts(endpoint):
    d = delivery(endpoint, WebhookDelivery.FAILED, hours_ago=1, attempts=3, response_status=503,
                 latency_ms=12.5, last_error="HTTP 503")  # fmt: skip
    out = selectors.delivery_out(d)
    assert out["endpoint_id"] == str(endpoint.pk) and out["event_type"] == "webhook.test"
    assert (out["attempts"], out["state"], out["response_status"]) == (3, "failed", 503)
    assert out["latency_ms"] == 12.5 and out["last_error"] == "HTTP 503"
    assert out["next_attempt_at"] is None
    assert selectors.delivery_out(delivery(endpoint, "pending"))["last_error"] is None


def test_gauges_count_endpoints_by_state_and_pending_deliveries(endpoint):
    other, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:10/hook")
    WebhookEndpoint.objects.filter(pk=other.pk).update(state=WebhookEndpoint.DISABLED)
    delivery(endpoint, WebhookDelivery.PENDING)
    delivery(endpoint, WebhookDelivery.PENDING)
    delivery(endpoint, WebhookDelivery.SUCCEEDED)
    endpoints, pending = selectors.webhook_gauges()
    by_state = {s.labels["state"]: s.value for s in endpoints.samples}
    assert by_state == {"active": 1, "disabled": 1}
    assert [s.value for s in pending.samples] == [2]
