"""delivery.dispatch, one step at a time: claims by compare-and-swap, one signed POST to a real
local receiver, and how an outcome moves the delivery and its endpoint (retry, give up, disable).
The whole loop through the API is in test_webhooks.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from delivery import dispatch, services
from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import events

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint_at(fast_retries, namespace):
    def make(url: str) -> WebhookEndpoint:
        made, _ = services.endpoint_create(created_by="admin-1", url=url)
        return made

    return make


def due(endpoint: WebhookEndpoint) -> WebhookDelivery:
    """A ``webhook.test`` delivery, due now."""
    return services.endpoint_test(endpoint_id=endpoint.pk)


def test_the_body_is_canonical_json():
    assert dispatch.body_of({"b": 1, "a": {"d": [1, 2], "c": None}}) == (
        '{"a":{"c":null,"d":[1,2]},"b":1}'
    )


def test_an_endpoint_filters_only_on_feed_types_it_names(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    assert dispatch.endpoint_types(endpoint) is None  # no filter: every type
    endpoint.event_types = [events.FEED_TYPES[0], "webhook.test"]
    assert dispatch.endpoint_types(endpoint) == frozenset({events.FEED_TYPES[0]})


def test_a_claim_is_taken_once(endpoint_at):
    delivery = due(endpoint_at("http://127.0.0.1:9/hook"))
    (claim,) = dispatch.claim_due()
    assert claim.delivery_id == delivery.pk and claim.event["type"] == "webhook.test"
    assert dispatch.claim_due() == []  # leased: a second dispatcher finds nothing
    later = timezone.now() + dispatch.LEASE + timedelta(seconds=1)
    (again,) = dispatch.claim_due(now=later)  # a lease that ran out is claimed again
    assert again.delivery_id == delivery.pk and again.token != claim.token


def test_nothing_is_claimed_for_a_backed_off_or_disabled_endpoint(endpoint_at):
    backed_off = endpoint_at("http://127.0.0.1:9/hook")
    due(backed_off)
    WebhookEndpoint.objects.filter(pk=backed_off.pk).update(
        blocked_until=timezone.now() + timedelta(minutes=5)
    )
    disabled = endpoint_at("http://127.0.0.1:10/hook")
    due(disabled)
    WebhookEndpoint.objects.filter(pk=disabled.pk).update(state=WebhookEndpoint.DISABLED)
    assert dispatch.claim_due() == []


def test_a_pass_claims_at_most_its_share_per_endpoint(endpoint_at, settings):
    settings.RMS_WEBHOOK_PER_ENDPOINT = 1
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    for _ in range(dispatch.AHEAD + 3):
        due(endpoint)
    assert len(dispatch.claim_due()) == dispatch.AHEAD
    assert dispatch.claim_due() == []


def test_send_posts_the_event_signed_with_the_endpoint_s_secret(endpoint_at, receiver):
    rx = receiver()
    endpoint = endpoint_at(rx.url)
    due(endpoint)
    (claim,) = dispatch.claim_due()
    outcome = dispatch.send(claim)
    assert (outcome.status, outcome.error) == (200, "") and outcome.latency_ms >= 0
    (got,) = rx.received
    headers = {k.lower(): v for k, v in got.headers.items()}
    assert headers["webhook-id"] == claim.event["id"]
    assert headers["content-type"] == "application/json"
    assert json.loads(got.body) == claim.event
    assert Webhook(endpoint.secret).verify(got.body, headers) == claim.event
    with pytest.raises(WebhookVerificationError):
        Webhook(services.new_secret()).verify(got.body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint.secret).verify(got.body.replace(b"webhook.test", b"webhook.tost"), headers)


def test_send_reports_an_error_status_and_an_unreachable_receiver(endpoint_at, receiver):
    rx = receiver(statuses=[503])
    due(endpoint_at(rx.url))
    (claim,) = dispatch.claim_due()
    refused = dispatch.send(claim)
    assert (refused.status, refused.error) == (503, "HTTP 503")
    assert dispatch.send(claim).status == 200  # the same claim may be sent again
    rx.stop()  # the port now refuses connections
    failed = dispatch.send(claim)
    assert failed.status is None and failed.latency_ms is None
    assert failed.error.startswith("ConnectError: ") and "refused" in failed.error
    assert claim.secret not in failed.error


def test_a_failure_schedules_a_retry_and_backs_the_endpoint_off(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    delivery = due(endpoint)
    (claim,) = dispatch.claim_due()
    now = timezone.now()
    state = dispatch.record(claim, dispatch.Outcome(500, 3.0, "HTTP 500"), now=now)
    assert state == WebhookDelivery.PENDING
    delivery.refresh_from_db()
    assert delivery.attempts == 1 and delivery.first_attempt_at == now
    assert delivery.response_status == 500 and delivery.last_error == "HTTP 500"
    assert delivery.next_attempt_at > now and delivery.lease_until is None
    assert delivery.retry_until == now + timedelta(hours=24)
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 1 and endpoint.failing_since == now
    assert endpoint.blocked_until > now and endpoint.state == WebhookEndpoint.ACTIVE


def test_a_failure_after_the_retry_window_gives_the_delivery_up(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    delivery = due(endpoint)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(retry_until=timezone.now())
    (claim,) = dispatch.claim_due()
    assert dispatch.record(claim, dispatch.Outcome(None, None, "timeout")) == "failed"
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.FAILED and delivery.next_attempt_at is None


def test_a_day_without_success_disables_the_endpoint_and_fails_what_is_pending(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    first, second = due(endpoint), due(endpoint)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        failing_since=timezone.now() - timedelta(hours=24)
    )
    claim = next(c for c in dispatch.claim_due() if c.delivery_id == first.pk)
    assert dispatch.record(claim, dispatch.Outcome(502, 1.0, "HTTP 502")) == "failed"
    endpoint.refresh_from_db()
    assert endpoint.state == WebhookEndpoint.DISABLED
    assert endpoint.disabled_reason == "No successful delivery for 24 h."
    second.refresh_from_db()
    assert second.state == WebhookDelivery.FAILED and second.last_error == "endpoint disabled"


def test_a_success_clears_the_endpoint_s_failures(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    delivery = due(endpoint)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        consecutive_failures=4, failing_since=timezone.now() - timedelta(hours=1)
    )
    (claim,) = dispatch.claim_due()
    assert dispatch.record(claim, dispatch.Outcome(204, 2.0, "")) == "succeeded"
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.SUCCEEDED and delivery.attempts == 1
    assert delivery.next_attempt_at is None and delivery.response_status == 204
    endpoint.refresh_from_db()
    assert endpoint.consecutive_failures == 0 and endpoint.failing_since is None
    assert endpoint.last_success_at is not None


def test_a_result_for_a_deleted_endpoint_is_dropped(endpoint_at):
    endpoint = endpoint_at("http://127.0.0.1:9/hook")
    due(endpoint)
    (claim,) = dispatch.claim_due()
    services.endpoint_delete(endpoint_id=endpoint.pk)
    assert dispatch.record(claim, dispatch.Outcome(500, 1.0, "HTTP 500")) == "failed"
    assert not WebhookDelivery.objects.exists()


def test_released_claims_are_due_again_at_once(endpoint_at):
    due(endpoint_at("http://127.0.0.1:9/hook"))
    claims = dispatch.claim_due()
    dispatch.release(claims)
    assert [c.delivery_id for c in dispatch.claim_due()] == [c.delivery_id for c in claims]
