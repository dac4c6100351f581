"""delivery.services: webhook endpoint writes — validation in the contract's error shape,
secrets, enabling and disabling, test events and manual retries — against the real database."""

from __future__ import annotations

import base64
import uuid

import pytest
from django.utils import timezone

from delivery import services
from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import changes
from rms.errors import DomainError, NotFound
from tests.factories import make_client, make_object

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def loopback(settings, namespace, other_namespace):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    return settings


def create(**kw) -> WebhookEndpoint:
    endpoint, _ = services.endpoint_create(created_by="admin-1", **{"url": URL, **kw})
    return endpoint


def field_error(exc: pytest.ExceptionInfo) -> tuple[int, str, list[str]]:
    err = exc.value
    assert isinstance(err, DomainError) and err.code == "validation_error"
    return err.status, *[(name, msgs) for name, msgs in err.fields.items()][0]


def test_a_new_endpoint_has_a_standard_webhooks_secret_and_starts_at_the_head(loopback):
    head = changes.head()
    endpoint, secret = services.endpoint_create(
        created_by="admin-1", url=URL, namespaces=["support", "billing", "support"]
    )
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 24
    assert endpoint.secret == secret and endpoint.state == WebhookEndpoint.ACTIVE
    assert endpoint.namespaces == ["billing", "support"]  # once each, sorted
    assert (endpoint.cursor_txid, endpoint.cursor_seq) == (head.txid, head.seq)
    assert services.endpoint_create(created_by="admin-1", url=URL)[1] != secret


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"url": 42}, "url"),
        ({"url": ""}, "url"),
        ({"url": "http://127.0.0.1/" + "a" * 2000}, "url"),
        ({"url": "ftp://127.0.0.1/hook"}, "url"),
        ({"namespaces": ["support", "nowhere"]}, "namespaces"),
        ({"namespaces": [1]}, "namespaces"),
        ({"event_types": ["object.nope"]}, "event_types"),
        ({"event_types": "object.created"}, "event_types"),
        ({"description": "x" * 501}, "description"),
        ({"description": None}, "description"),
    ],
)
def test_bad_fields_are_a_400_naming_the_field_and_nothing_is_written(loopback, kw, field):
    with pytest.raises(DomainError) as exc:
        create(**kw)
    status, name, messages = field_error(exc)
    assert (status, name) == (400, field) and messages and all(messages)
    assert not WebhookEndpoint.objects.exists()


def test_an_unknown_namespace_is_named_in_the_message(loopback):
    with pytest.raises(DomainError) as exc:
        create(namespaces=["nowhere", "support"])
    assert field_error(exc)[2] == ["Unknown namespace(s): nowhere."]


def test_an_update_with_unknown_fields_names_each_and_changes_nothing(loopback):
    endpoint = create(description="before")
    with pytest.raises(DomainError) as exc:
        services.endpoint_update(
            endpoint_id=endpoint.pk, data={"description": "after", "secret": "x", "id": "y"}
        )
    assert exc.value.status == 400
    assert exc.value.fields == {"id": ["Unknown field."], "secret": ["Unknown field."]}
    endpoint.refresh_from_db()
    assert endpoint.description == "before"


def test_an_update_to_an_unknown_state_is_refused(loopback):
    endpoint = create()
    with pytest.raises(DomainError) as exc:
        services.endpoint_update(endpoint_id=endpoint.pk, data={"state": "paused"})
    assert field_error(exc)[:2] == (400, "state")


# Committed writes: the feed's head is what was released, and on PostgreSQL that excludes the
# test's own open transaction.
@pytest.mark.django_db(transaction=True)
def test_disabling_by_an_admin_and_re_enabling_at_the_head_clears_the_failures(loopback):
    endpoint = create()
    services.endpoint_update(endpoint_id=endpoint.pk, data={"state": "disabled"})
    endpoint.refresh_from_db()
    assert endpoint.state == WebhookEndpoint.DISABLED
    assert endpoint.disabled_reason == "Disabled by an admin."
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        consecutive_failures=9, failing_since=timezone.now(), blocked_until=timezone.now()
    )
    client, _ = make_client("client-1", "client", ["support"])
    make_object(client, "support")  # the log moves on while the endpoint is off
    head = changes.head()
    assert (head.txid, head.seq) != (endpoint.cursor_txid, endpoint.cursor_seq)
    services.endpoint_update(endpoint_id=endpoint.pk, data={"state": "active"})
    endpoint.refresh_from_db()
    assert endpoint.state == WebhookEndpoint.ACTIVE and endpoint.disabled_reason == ""
    assert endpoint.consecutive_failures == 0
    assert endpoint.failing_since is None and endpoint.blocked_until is None
    assert (endpoint.cursor_txid, endpoint.cursor_seq) == (head.txid, head.seq)


def test_rotation_replaces_the_stored_secret(loopback):
    endpoint = create()
    new = services.endpoint_rotate_secret(endpoint_id=endpoint.pk)
    assert new != endpoint.secret and new.startswith("whsec_")
    endpoint.refresh_from_db()
    assert endpoint.secret == new


@pytest.mark.parametrize("endpoint_id", ["not-a-uuid", str(uuid.uuid4())])
def test_an_unknown_endpoint_is_not_found(loopback, endpoint_id):
    for call in (
        lambda: services.get_endpoint(endpoint_id),
        lambda: services.endpoint_delete(endpoint_id=endpoint_id),
        lambda: services.endpoint_rotate_secret(endpoint_id=endpoint_id),
        lambda: services.endpoint_test(endpoint_id=endpoint_id),
    ):
        with pytest.raises(NotFound):
            call()


def test_deleting_an_endpoint_deletes_its_deliveries(loopback):
    endpoint = create()
    services.endpoint_test(endpoint_id=endpoint.pk)
    services.endpoint_delete(endpoint_id=endpoint.pk)
    assert not WebhookEndpoint.objects.exists() and not WebhookDelivery.objects.exists()


def test_a_test_event_is_a_pending_delivery_due_now(loopback):
    endpoint = create()
    before = timezone.now()
    delivery = services.endpoint_test(endpoint_id=endpoint.pk)
    assert delivery.state == WebhookDelivery.PENDING and delivery.event_type == "webhook.test"
    assert delivery.event["id"] == delivery.event_id and delivery.event["data"] == {}
    assert before <= delivery.next_attempt_at <= timezone.now()


def test_a_disabled_endpoint_takes_no_test_event_and_no_retry(loopback):
    endpoint = create()
    delivery = services.endpoint_test(endpoint_id=endpoint.pk)
    services.endpoint_update(endpoint_id=endpoint.pk, data={"state": "disabled"})
    with pytest.raises(DomainError) as exc:
        services.endpoint_test(endpoint_id=endpoint.pk)
    assert (exc.value.status, exc.value.code) == (409, "endpoint_disabled")
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state=WebhookDelivery.FAILED)
    with pytest.raises(DomainError) as exc:
        services.delivery_retry(endpoint_id=endpoint.pk, delivery_id=delivery.pk)
    assert (exc.value.status, exc.value.code) == (409, "endpoint_disabled")


def test_a_failed_delivery_retried_is_due_now_with_a_fresh_window(loopback):
    endpoint = create()
    delivery = services.endpoint_test(endpoint_id=endpoint.pk)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        state=WebhookDelivery.FAILED, retry_until=timezone.now(), next_attempt_at=None
    )
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(blocked_until=timezone.now())
    retried = services.delivery_retry(endpoint_id=endpoint.pk, delivery_id=delivery.pk)
    retried.refresh_from_db()
    assert retried.state == WebhookDelivery.PENDING and retried.retry_until is None
    assert retried.next_attempt_at <= timezone.now()
    endpoint.refresh_from_db()
    assert endpoint.blocked_until is None


def test_a_succeeded_delivery_is_not_retried(loopback):
    endpoint = create()
    delivery = services.endpoint_test(endpoint_id=endpoint.pk)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(state=WebhookDelivery.SUCCEEDED)
    with pytest.raises(DomainError) as exc:
        services.delivery_retry(endpoint_id=endpoint.pk, delivery_id=delivery.pk)
    assert (exc.value.status, exc.value.code) == (409, "already_delivered")


def test_a_delivery_of_another_endpoint_is_not_found(loopback):
    mine, theirs = create(), create()
    delivery = services.endpoint_test(endpoint_id=theirs.pk)
    for delivery_id in (delivery.pk, "nope"):
        with pytest.raises(NotFound):
            services.delivery_retry(endpoint_id=mine.pk, delivery_id=delivery_id)
