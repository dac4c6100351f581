"""delivery.tasks: the dispatcher task called as a worker calls it — one pass that turns feed
events into deliveries and POSTs them to a real local receiver — and its registration."""

from __future__ import annotations

import pytest

from delivery import services, tasks
from delivery.models import WebhookDelivery
from rms.celery import app
from tests.delivery.conftest import drive
from tests.factories import make_client, make_object

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_pass_with_nothing_to_do_reports_nothing(fast_retries, namespace):
    assert tasks.dispatch_webhooks() == {"created": 0, "claimed": 0, "finished": 0}


def test_a_pass_delivers_new_feed_events_and_a_test_event(fast_retries, receiver, namespace):
    rx = receiver()
    endpoint, _ = services.endpoint_create(created_by="admin-1", url=rx.url)
    client, _ = make_client("client-1", "client", ["support"])
    make_object(client, "support")
    services.endpoint_test(endpoint_id=endpoint.pk)
    result = tasks.dispatch_webhooks()
    assert result["created"] == 1 and result["claimed"] == 2
    drive(lambda: len(rx.received) == 2)
    assert sorted(WebhookDelivery.objects.values_list("event_type", "state")) == [
        ("object.created", "succeeded"),
        ("webhook.test", "succeeded"),
    ]
    assert tasks.dispatch_webhooks() == {"created": 0, "claimed": 0, "finished": 0}


def test_the_task_keeps_its_registered_name_and_late_acknowledgement():
    # Beat entries and queued messages name the task: a rename would orphan them.
    task = app.tasks["delivery.tasks.dispatch_webhooks"]
    assert task.name == tasks.dispatch_webhooks.name
    assert task.acks_late and task.reject_on_worker_lost
    assert task.soft_time_limit < task.time_limit
    schedule = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert "delivery.tasks.dispatch_webhooks" in schedule
