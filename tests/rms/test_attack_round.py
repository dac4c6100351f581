"""Attacking this round's endpoints and pages: namespace scoping, hostile input and Redis away.

Each test is an attack through the real stack (DRF test client, the real cache backend pointed
at a closed port, the erasure task run as a worker runs it); a defect found is pinned by a test
that failed before its mend. What was tried is listed in docs/DECISIONS.md ("Attacking this
round's endpoints")."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest
from rest_framework.test import APIClient

from rms.celery import app
from taskruns import tasks
from taskruns.models import TaskRun
from tests.factories import api_signal, make_client

pytestmark = pytest.mark.django_db


def as_api(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def run_erasure(api, kind: str, subject: str, namespace: str) -> dict:
    """POST the erasure, run its task here as a worker would; the receipt."""
    body = {"subject": {"kind": kind, "id": subject}, "namespace": namespace, "reason": "Art. 17"}
    resp = api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    out = resp.json()
    assert tasks.run_task.run(out["task"]) == TaskRun.SUCCEEDED
    return api.get(f"/api/v1/erasures/{out['id']}").json()


# --- erasure: confined to its namespace ------------------------------------------------------


def keyed_signal(client_api, actor_id: str) -> tuple[str, dict, dict]:
    """A signal of ``actor_id`` with a request_id on a new ``support`` object: the object id,
    the signal's fields and its first answer (stored for its retries)."""
    oid = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "Support-only fact", "epistemic_type": "ASSERTED"},
        format="json",
    ).json()["id"]
    keyed = {"actor_id": actor_id, "request_id": str(uuid.uuid4())}
    first = api_signal(client_api, oid, **keyed)
    assert first.status_code == 201, first.content
    return oid, keyed, first.json()


def test_an_erasure_in_one_namespace_leaves_another_namespaces_stored_answers_alone(
    client_api, other_namespace
):
    """An actor id is not unique across namespaces: erasing actor ``alice`` in ``billing`` (by
    an admin confined to billing) must not rewrite the stored answer of ``alice``'s keyed signal
    in ``support``, which a retry there returns."""
    oid, keyed, first = keyed_signal(client_api, "alice-support")
    billing_admin = as_api(make_client("billing-admin", "admin", ["billing"])[1])
    receipt = run_erasure(billing_admin, "actor", "alice-support", "billing")
    assert receipt["state"] == "completed", receipt
    retry = api_signal(client_api, oid, **keyed)
    assert retry.status_code == 200, retry.content
    assert retry.json() == first
    assert retry.json()["operation"]["actor_id"] == "alice-support"
    assert receipt["counts"]["stored_answers"] == 0, receipt


def test_an_erasure_in_the_answers_namespace_still_rewrites_it(client_api, admin_api):
    oid, keyed, first = keyed_signal(client_api, "alice-support")
    receipt = run_erasure(admin_api, "actor", "alice-support", "support")
    assert receipt["counts"]["stored_answers"] == 1, receipt
    retry = api_signal(client_api, oid, **keyed)
    assert retry.status_code == 200, retry.content
    assert "alice-support" not in retry.content.decode()
    assert retry.json()["operation"]["id"] == first["operation"]["id"]


# --- Redis away: the cache and the broker ----------------------------------------------------

DEAD_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens there


@pytest.fixture
def redis_down(settings):
    """The cache and the broker at a closed port, with the production cache backend."""
    settings.CACHES = {
        "default": {
            "BACKEND": "rms.cache.TolerantRedisCache",
            "LOCATION": DEAD_REDIS,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
    with broker_at(DEAD_REDIS):
        settings.CELERY_BROKER_URL = DEAD_REDIS
        settings.CELERY_BROKER_IS_EMBEDDED = False
        yield


@contextmanager
def broker_at(url: str):
    """The Celery app publishing to ``url`` (its connection pools dropped before and after, so
    neither this test nor a later one reuses the other's broker)."""

    def drop_pools():
        app._pool = None
        app.amqp._producer_pool = None

    saved = app.conf.broker_url  # read first: the app loads its settings on first use
    app.conf.broker_url = url
    drop_pools()
    try:
        yield
    finally:
        app.conf.broker_url = saved
        drop_pools()


def warning_codes(answer: dict) -> list[str]:
    return [w["code"] for w in answer.get("warnings", [])]


def test_with_the_cache_away_suppressed_is_computed_and_says_the_cache_is_unavailable(
    client_api, redis_down
):
    client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"},
        format="json",
    )
    resp = client_api.get("/api/v1/suppressed?namespace=support")
    assert resp.status_code == 200, resp.content
    answer = resp.json()
    assert answer["cached"] is False
    assert warning_codes(answer) == ["cache_unavailable"]
    assert "cache" in answer["warnings"][0]["message"]


def test_with_the_cache_up_suppressed_has_no_warning(client_api):
    answer = client_api.get("/api/v1/suppressed?namespace=support").json()
    assert answer.get("warnings", []) == []


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_away_an_erasure_is_accepted_and_says_it_is_not_started_yet(
    admin_api, redis_down
):
    body = {"subject": {"kind": "actor", "id": "alice"}, "namespace": "support", "reason": "x"}
    resp = admin_api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    answer = resp.json()
    assert warning_codes(answer) == ["broker_unavailable"]
    run = TaskRun.objects.get(pk=answer["task"])
    assert (run.state, run.sent_at) == (TaskRun.QUEUED, None)  # kept for the reconciler


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_up_an_erasure_has_no_warning(admin_api):
    body = {"subject": {"kind": "actor", "id": "alice"}, "namespace": "support", "reason": "x"}
    resp = admin_api.post("/api/v1/erasures", body, format="json")
    assert resp.status_code == 202, resp.content
    assert resp.json().get("warnings", []) == []
    assert TaskRun.objects.get(pk=resp.json()["task"]).sent_at is not None
