"""delivery.models: one delivery per endpoint and event (the database enforces it, so a feed
page read twice creates nothing twice), and the endpoint's printed forms carry no secret."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from delivery import dispatch, services
from delivery.models import WebhookDelivery
from tests.factories import make_client, make_object

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def endpoint(settings, namespace):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    made, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:9/hook")
    return made


def test_an_event_is_delivered_to_an_endpoint_once(endpoint):
    WebhookDelivery.objects.create(endpoint=endpoint, event_id="e-1", event_type="t", event={})
    with pytest.raises(IntegrityError), transaction.atomic():
        WebhookDelivery.objects.create(endpoint=endpoint, event_id="e-1", event_type="t", event={})
    assert WebhookDelivery.objects.count() == 1


def test_a_feed_page_pumped_again_creates_nothing_twice(endpoint):
    client, _ = make_client("client-1", "client", ["support"])
    make_object(client, "support")
    cursor = (endpoint.cursor_txid, endpoint.cursor_seq)
    assert dispatch.pump() == 1
    endpoint.refresh_from_db()
    assert (endpoint.cursor_txid, endpoint.cursor_seq) != cursor
    # Put the cursor back, as a pass that died before moving it would have left it.
    type(endpoint).objects.filter(pk=endpoint.pk).update(
        cursor_txid=cursor[0], cursor_seq=cursor[1]
    )
    dispatch.pump()
    assert WebhookDelivery.objects.count() == 1


def test_an_endpoint_prints_without_its_secret(endpoint):
    for text in (str(endpoint), repr(endpoint)):
        assert endpoint.url in text and endpoint.secret not in text
