"""Issue 15, degraded dependencies, in process: the cache, the broker or the database away is a
degraded answer or a 503, never a 500; task runs are never lost (the reconciler). The same
with real servers stopped and workers killed is in ``test_outages``."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from feedback import selectors
from feedback.models import FeedbackSession
from rms import health, telemetry
from taskruns import heartbeat, kinds, runs, tasks
from taskruns.models import TaskRun, WorkerHeartbeat
from tests.factories import make_namespace, make_objects, post, session
from tests.feedback.conftest import ROOT
from tests.servers import free_port

DEAD_REDIS = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there


@pytest.fixture
def cache_down(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "rms.cache.TolerantRedisCache",
            "LOCATION": DEAD_REDIS,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }


@pytest.fixture
def broker_down(settings):
    settings.CELERY_BROKER_URL = DEAD_REDIS
    settings.CELERY_BROKER_IS_EMBEDDED = False


# --- the cache ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_with_the_cache_unreachable_throttling_fails_open_and_ingestion_goes_on(
    client_api, cache_down
):
    ids = make_objects(client_api, 2)
    failed_open = telemetry.value(telemetry.THROTTLE_FAILED_OPEN)
    cache_errors = telemetry.value(telemetry.CACHE_ERRORS)
    started = time.monotonic()
    for i in range(5):
        resp = post(client_api, session(f"r-{i}", [(ids[0], 10), (ids[1], 20)]))
        assert resp.status_code == 201, resp.content
    assert time.monotonic() - started < 5
    assert FeedbackSession.objects.count() == 5
    assert client_api.get(f"/api/v1/objects/{ids[0]}").status_code == 200
    # every call since (5 sessions + 1 read) let through, and counted
    assert telemetry.value(telemetry.THROTTLE_FAILED_OPEN) - failed_open == 6
    assert telemetry.value(telemetry.CACHE_ERRORS, "get") > 0
    assert telemetry.value(telemetry.CACHE_ERRORS) - cache_errors >= 12  # a get and a set each


@pytest.mark.django_db
def test_a_working_cache_still_throttles(client_api, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    from django.core.cache import cache

    from rms.api.throttling import ClientRateThrottle

    cache.clear()  # counts of earlier tests' clients (ids are reused)

    rates = {"client": "3/min"}
    ClientRateThrottle.THROTTLE_RATES = rates
    try:
        codes = [client_api.get("/api/v1/namespaces").status_code for _ in range(4)]
    finally:
        del ClientRateThrottle.THROTTLE_RATES
    assert codes == [200, 200, 200, 429]


@pytest.mark.django_db
def test_the_dashboard_renders_with_the_cache_unreachable(cache_down, client, django_user_model):
    from rms.models import ApiClient

    user = django_user_model.objects.create_user("op", password="pw-123456")
    ApiClient.objects.create(user=user, name="op", role="operator", token_hash="x" * 64)
    make_namespace("support")
    client.force_login(user)
    resp = client.get("/")
    assert resp.status_code == 200
    assert telemetry.value(telemetry.CACHE_ERRORS) > 0


# --- /health -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_health_is_200_when_everything_answers(anon_api):
    started = time.monotonic()
    resp = anon_api.get("/api/v1/health")
    assert time.monotonic() - started < 1
    body = resp.json()
    assert resp.status_code == 200, body
    assert (body["status"], body["database"], body["cache"], body["broker"]) == (
        "ok",
        "ok",
        "ok",
        "ok",
    )
    assert body["unavailable"] == []
    assert body["worker"]["state"] in ("none", "ok", "stale")  # informational, never the status


@pytest.mark.django_db
def test_health_names_the_cache_and_the_broker_when_they_are_down(
    anon_api, cache_down, broker_down
):
    started = time.monotonic()
    resp = anon_api.get("/api/v1/health")
    elapsed = time.monotonic() - started
    assert resp.status_code == 503
    body = resp.json()
    assert (body["status"], body["database"], body["cache"], body["broker"]) == (
        "degraded",
        "ok",
        "unavailable",
        "unavailable",
    )
    assert body["unavailable"] == ["cache", "broker"]
    assert elapsed < 1


@pytest.mark.django_db
def test_health_answers_within_a_second_when_a_dependency_hangs(anon_api, monkeypatch):
    def hangs():
        time.sleep(3)
        return health.OK

    monkeypatch.setitem(health.CHECKS, "database", hangs)
    started = time.monotonic()
    resp = anon_api.get("/api/v1/health")
    assert time.monotonic() - started < 1
    assert resp.status_code == 503
    assert resp.json()["database"] == "unavailable"
    assert resp.json()["unavailable"] == ["database"]


@pytest.mark.django_db(transaction=True)
def test_health_reports_worker_liveness_from_the_last_heartbeat(anon_api, settings):
    WorkerHeartbeat.objects.all().delete()
    assert anon_api.get("/api/v1/health").json()["worker"] == {
        "state": "none",
        "last_heartbeat": None,
        "alive": 0,
    }
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RMS_TASK_HEARTBEAT_TIMEOUT + 5)
    WorkerHeartbeat.objects.create(name="w-old", started_at=stale, seen_at=stale)
    body = anon_api.get("/api/v1/health").json()
    assert body["worker"]["state"] == "stale" and body["worker"]["alive"] == 0
    WorkerHeartbeat.objects.create(name="w-new", started_at=now, seen_at=now)
    body = anon_api.get("/api/v1/health").json()
    assert body["worker"]["state"] == "ok" and body["worker"]["alive"] == 1
    assert body["worker"]["last_heartbeat"].startswith(now.strftime("%Y-%m-%dT%H:%M"))
    assert 0 <= body["worker"]["age_seconds"] < 5


@pytest.mark.django_db(transaction=True)
def test_a_worker_beat_writes_its_heartbeat_on_its_own_connection():
    beat = heartbeat.WorkerBeat("w-test", every=0.05).start()
    try:
        deadline = time.monotonic() + 5
        while not WorkerHeartbeat.objects.filter(name="w-test").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        first = WorkerHeartbeat.objects.get(name="w-test").seen_at
        time.sleep(0.2)
        assert WorkerHeartbeat.objects.get(name="w-test").seen_at > first
    finally:
        beat.stop()


# --- the database ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_database_error_in_a_view_is_503_with_retry_after(operator_api, monkeypatch):
    def lost(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(selectors, "namespace_metrics", lost)
    before = telemetry.value(telemetry.DATABASE_UNAVAILABLE)
    resp = operator_api.get("/api/v1/metrics?namespace=support")
    assert resp.status_code == 503
    assert resp["Retry-After"] == "5"
    assert resp.json()["error"]["code"] == "service_unavailable"
    assert telemetry.value(telemetry.DATABASE_UNAVAILABLE) == before + 1


@pytest.mark.django_db
def test_a_database_error_outside_the_api_views_is_503_too(client, monkeypatch):
    from django.contrib.sessions.backends import db as session_db

    def lost(self, *args, **kwargs):
        raise OperationalError("the database system is shutting down")

    monkeypatch.setattr(session_db.SessionStore, "load", lost)
    client.raise_request_exception = False
    client.cookies["sessionid"] = "x" * 32
    resp = client.get("/")
    assert resp.status_code == 503 and resp["Retry-After"] == "5"
    assert resp["Content-Type"].startswith("text/plain")


# --- tasks and the broker ----------------------------------------------------------------------


#: What the reconciler reports for chunks when no run fans out.
NO_CHUNKS = {"chunks_requeued": 0, "chunks_sent": 0, "chunks_send_failed": 0}


def refuse(*args, **kwargs):
    raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


@pytest.mark.django_db
def test_with_the_broker_down_a_started_task_is_202_queued_and_sent_later(
    operator_api, monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(tasks.run_task, "apply_async", refuse)
    failures = telemetry.value(telemetry.TASK_SEND_FAILURES)
    with django_capture_on_commit_callbacks(execute=True):
        resp = operator_api.post(
            "/api/v1/tasks", {"kind": "benchmark_suite", "params": {}}, format="json"
        )
    assert resp.status_code == 202, resp.content
    run = TaskRun.objects.get(pk=resp.json()["id"])
    assert (run.state, run.sent_at) == ("queued", None)
    assert telemetry.value(telemetry.TASK_SEND_FAILURES) == failures + 1
    # the reconciler, while the broker is still down: nothing sent, nothing lost
    TaskRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(seconds=10))
    assert tasks.reconcile_task_runs.run() == {
        "requeued": 0,
        "sent": 0,
        "send_failed": 1,
        **NO_CHUNKS,
    }
    # the broker is back
    sent = []
    monkeypatch.setattr(tasks.run_task, "apply_async", lambda args, **kw: sent.append(args[0]))
    assert tasks.reconcile_task_runs.run() == {
        "requeued": 0,
        "sent": 1,
        "send_failed": 0,
        **NO_CHUNKS,
    }
    assert sent == [str(run.pk)]
    assert TaskRun.objects.get(pk=run.pk).sent_at is not None
    # and once sent it is not sent again while it waits its turn
    assert tasks.reconcile_task_runs.run()["sent"] == 0


@pytest.mark.django_db
def test_the_reconciler_requeues_dead_runs_and_leaves_live_ones(operator_api, monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.run_task, "apply_async", lambda args, **kw: sent.append(args[0]))
    client = operator_api.row
    now = timezone.now()
    long_ago = now - timedelta(hours=1)
    timeout = timedelta(seconds=tasks.settings.RMS_TASK_HEARTBEAT_TIMEOUT)

    def run(state, **fields):
        r = runs.task_start(client=client, kind="benchmark_suite", params={})
        TaskRun.objects.filter(pk=r.pk).update(state=state, created_at=long_ago, **fields)
        return r.pk

    dead = run("running", heartbeat_at=now - timeout - timedelta(seconds=1), sent_at=long_ago)
    alive = run("running", heartbeat_at=now - timeout / 2, sent_at=long_ago)
    waiting = run("queued", sent_at=now - timedelta(seconds=30))
    lost = run("queued", sent_at=now - timedelta(seconds=tasks.settings.RMS_TASK_RESEND_AFTER + 1))
    young = runs.task_start(client=client, kind="benchmark_suite", params={}).pk
    done = run("succeeded", sent_at=long_ago)

    assert tasks.reconcile_task_runs.run() == {
        "requeued": 1,
        "sent": 2,
        "send_failed": 0,
        **NO_CHUNKS,
    }
    assert sorted(sent) == sorted([str(dead), str(lost)])
    states = dict(TaskRun.objects.values_list("pk", "state"))
    assert (states[dead], states[alive], states[waiting], states[young], states[done]) == (
        "queued",
        "running",
        "queued",
        "queued",
        "succeeded",
    )
    # the requeued run is claimed by the message and runs; the live one is not claimed twice
    assert tasks.run_task.run(str(dead)) == "succeeded"
    assert tasks.run_task.run(str(alive)) is None
    assert TaskRun.objects.get(pk=dead).attempts == 1


@pytest.mark.django_db
def test_a_retry_puts_the_run_back_to_queued_so_its_message_claims_it(operator_api, monkeypatch):
    calls = []

    def flaky(params, progress):
        calls.append(TaskRun.objects.get(pk=run.pk).state)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return {"ok": True}

    monkeypatch.setitem(
        kinds.KINDS, "benchmark_suite", replace(kinds.KINDS["benchmark_suite"], run=flaky)
    )
    run = runs.task_start(client=operator_api.row, kind="benchmark_suite", params={})
    tasks.run_task.apply(args=[str(run.pk)])
    done = TaskRun.objects.get(pk=run.pk)
    assert (done.state, done.attempts, calls) == ("succeeded", 2, ["running", "running"])


def test_heartbeat_settings_are_checked():
    code = "import django; django.setup()"
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env={
            "DJANGO_SETTINGS_MODULE": "rms.settings",
            "RMS_DEVELOPMENT": "true",
            "RMS_TASK_HEARTBEAT_EVERY": "10",
            "RMS_TASK_HEARTBEAT_TIMEOUT": "15",
            "PATH": "/usr/bin:/bin",
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "RMS_TASK_HEARTBEAT_TIMEOUT" in bad.stderr


def test_beat_runs_the_reconciler(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["task-reconcile"]
    assert entry["task"] == "feedback.tasks.reconcile_task_runs"
    assert entry["schedule"] == settings.RMS_RECONCILE_EVERY == 30
    assert entry["options"]["expires"] == 30
    # a dead worker's run is re-queued within the 2 minutes with the defaults
    assert settings.RMS_TASK_HEARTBEAT_TIMEOUT + settings.RMS_RECONCILE_EVERY <= 120
