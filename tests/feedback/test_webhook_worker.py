"""Webhooks through a real Celery worker: the ``dispatch_webhooks`` task (what beat sends every
second) delivers a committed change to a local receiver, and the API's test event reaches it
through the task the API enqueues after its commit."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.delivery.conftest import Receiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module", autouse=True)
def _worker_may_call_loopback():
    """The worker subprocess reads its settings from the environment it starts with."""
    previous = os.environ.get("RMS_WEBHOOKS_ALLOW_PRIVATE")
    os.environ["RMS_WEBHOOKS_ALLOW_PRIVATE"] = "1"
    yield
    if previous is None:
        os.environ.pop("RMS_WEBHOOKS_ALLOW_PRIVATE")
    else:
        os.environ["RMS_WEBHOOKS_ALLOW_PRIVATE"] = previous


def _wait(predicate, worker, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        worker.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"not delivered in {timeout} s:\n{worker.log_tail()}")
        time.sleep(0.05)


def test_the_worker_delivers_changes_and_test_events(
    celery_worker, settings, admin_api, client_api
):
    from delivery.tasks import dispatch_webhooks

    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    hook = Receiver()
    hook.start()
    try:
        r = admin_api.post("/api/v1/webhooks", {"url": hook.url}, format="json")
        assert r.status_code == 201, r.content
        endpoint = r.json()
        r = client_api.post(
            "/api/v1/objects",
            {"namespace": "support", "content": "x", "epistemic_type": "ASSERTED"},
            format="json",
        )
        oid = r.json()["id"]
        dispatch_webhooks.delay()
        _wait(lambda: len(hook.received) == 1, celery_worker)
        assert json.loads(hook.received[0].body)["target_id"] == oid
        r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/test")
        assert r.status_code == 202
        _wait(lambda: len(hook.received) == 2, celery_worker)  # enqueued on commit by the API
        assert json.loads(hook.received[1].body)["type"] == "webhook.test"
    finally:
        hook.stop()
