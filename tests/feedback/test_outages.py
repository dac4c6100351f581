"""Issue 15 with real processes: Redis stopped mid-test under gunicorn, a worker and beat; the
database unreachable; a worker killed with SIGKILL mid-task."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from django.conf import settings

from feedback.models import FeedbackSession
from taskruns import runs, tasks
from taskruns.models import TaskRun
from tests.factories import make_client, make_namespace, make_object
from tests.feedback.conftest import ROOT, start_worker, stop_worker, tasks_sent_to
from tests.servers import RedisServer, free_port, gunicorn, stop, subprocess_database_url

pytestmark = pytest.mark.django_db(transaction=True)


def call(port: int, method: str, path: str, token: str | None = None, body=None):
    """(status, headers, JSON body, seconds) of one HTTP call to the server on ``port``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Token {token}")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            status, headers, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        status, headers, raw = err.code, dict(err.headers), err.read()
    return status, headers, json.loads(raw), time.monotonic() - started


def session(oid, request_id: str) -> dict:
    return {
        "session_id": "conv-1",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 100,
        "injections": [{"object_id": str(oid), "token_cost": 10}],
        "signals": [{"object_id": str(oid), "signal_type": "CONFIRMED"}],
    }


def wait_until(predicate, timeout: float, what: str, logs=()):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout} s\n" + "\n".join(log() for log in logs))
        time.sleep(0.2)


@pytest.mark.redis
def test_redis_stopped_mid_test_ingestion_goes_on_health_says_503_tasks_run_after(tmp_path):
    """gunicorn, a worker and beat all on a Redis of the test's own (cache and broker); it is
    killed, then started again on the same port."""
    redis = RedisServer(tmp_path)
    redis.start()
    make_namespace("support")
    client, token = make_client("client-1", "client", ["support"])
    _, op_token = make_client("operator-1", "operator")
    obj = make_object(client)
    env = {
        "REDIS_URL": redis.url,
        "CELERY_BROKER_URL": redis.url,
        "DATABASE_URL": subprocess_database_url(),
        "RMS_VAR_DIR": str(tmp_path),
        "RMS_RECONCILE_EVERY": "1",
        "RMS_TASK_HEARTBEAT_EVERY": "1",
        "RMS_TASK_HEARTBEAT_TIMEOUT": "5",
        "PYTHONUNBUFFERED": "1",
    }
    full_env = {**os.environ, **env}
    worker_log = tmp_path / "worker.log"
    beat_log = tmp_path / "beat.log"
    with open(worker_log, "w") as wlog, open(beat_log, "w") as blog:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "rms", "worker", "--pool", "solo", "-l",
             "info", "-n", f"outage-{uuid.uuid4().hex[:6]}@%h", "--without-gossip",
             "--without-mingle"],
            cwd=ROOT, env=full_env, stdout=wlog, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "rms", "beat", "-l", "info",
             "--schedule", str(tmp_path / "beat-schedule")],
            cwd=ROOT, env=full_env, stdout=blog, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    logs = (worker_log.read_text, beat_log.read_text)
    try:
        with gunicorn(tmp_path, **env) as web:
            port = web.port
            logs = (*logs, web.log)
            status, _, body, _ = call(port, "GET", "/api/v1/health")
            assert status == 200 and body["cache"] == body["broker"] == "ok", body
            wait_until(
                lambda: call(port, "GET", "/api/v1/health")[2]["worker"]["state"] == "ok",
                30, "a worker heartbeat", logs,
            )  # fmt: skip
            status, _, body, _ = call(port, "POST", "/api/v1/feedback-sessions", token,
                                      session(obj.pk, "before"))  # fmt: skip
            assert status == 201, body

            redis.stop()  # --- the outage ---------------------------------------------------
            status, _, body, seconds = call(port, "GET", "/api/v1/health")
            assert status == 503, body
            assert (body["database"], body["cache"], body["broker"]) == (
                "ok",
                "unavailable",
                "unavailable",
            )
            assert body["unavailable"] == ["cache", "broker"]
            assert seconds < 1, seconds
            for i in range(3):
                status, _, body, seconds = call(
                    port, "POST", "/api/v1/feedback-sessions", token, session(obj.pk, f"d-{i}")
                )
                assert status == 201, body
                assert seconds < 3
            status, _, body, _ = call(port, "POST", "/api/v1/feedback-sessions/batch", token,
                                      [session(obj.pk, f"b-{i}") for i in range(5)])  # fmt: skip
            assert status == 207 and [r["status"] for r in body["results"]] == [201] * 5
            started = []
            for kind in ("benchmark_suite", "verify_chain"):
                status, _, body, seconds = call(port, "POST", "/api/v1/tasks", op_token,
                                                {"kind": kind, "params": {}})  # fmt: skip
                assert status == 202, body
                assert body["state"] == "queued" and body["sent"] is False
                assert seconds < 3
                started.append(body["id"])
            assert FeedbackSession.objects.count() == 9
            assert set(TaskRun.objects.filter(pk__in=started).values_list("state", flat=True)) == {
                "queued"
            }

            redis.start()  # --- back: beat's reconciler sends the runs, the worker runs them ---
            wait_until(
                lambda: call(port, "GET", "/api/v1/health")[0] == 200, 30, "health 200", logs
            )

            def all_done():
                states = set(TaskRun.objects.filter(pk__in=started).values_list("state", flat=True))
                return states == {"succeeded"}

            wait_until(all_done, 60, "the tasks posted during the outage succeeded", logs)
            status, _, body, _ = call(port, "POST", "/api/v1/feedback-sessions", token,
                                      session(obj.pk, "after"))  # fmt: skip
            assert status == 201
            assert FeedbackSession.objects.count() == 10
            assert "Internal Server Error" not in web.log()  # not one 500 all along
    finally:
        for proc in (beat, worker):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(20)
        redis.stop()


def test_with_the_database_unreachable_the_api_is_503_with_retry_after(tmp_path):
    if settings.DATABASE_IS_POSTGRES:
        dead = f"postgres://postgres@127.0.0.1:{free_port()}/nowhere"
    else:
        dead = f"sqlite:///{tmp_path}/no-such-dir/db.sqlite3"
    with gunicorn(tmp_path, DATABASE_URL=dead) as web:
        status, _, body, seconds = call(web.port, "GET", "/api/v1/health")
        assert status == 503 and body["database"] == "unavailable", body
        assert body["unavailable"][0] == "database" and seconds < 1
        for method, path, payload in [
            ("GET", "/api/v1/objects", None),
            ("POST", "/api/v1/feedback-sessions", session(uuid.uuid4(), "r-1")),
            ("GET", "/api/v1/metrics?namespace=support", None),
        ]:
            status, headers, body, _ = call(web.port, method, path, "some-token", payload)
            assert status == 503, (path, body)
            assert headers["Retry-After"] == "5"
            assert body["error"]["code"] == "service_unavailable"
        # the dashboard too (its session middleware reads the database before any view)
        request = urllib.request.Request(f"http://127.0.0.1:{web.port}/accounts/login/")
        request.add_header("Cookie", "sessionid=" + "x" * 32)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == 503 and err.value.headers["Retry-After"] == "5"
        assert "Internal Server Error" not in web.log()


HEARTBEAT = {"RMS_TASK_HEARTBEAT_EVERY": "1", "RMS_TASK_HEARTBEAT_TIMEOUT": "3"}


def test_a_worker_killed_with_sigkill_mid_task_its_run_succeeds_on_a_new_worker(tmp_path, settings):
    settings.RMS_TASK_HEARTBEAT_EVERY, settings.RMS_TASK_HEARTBEAT_TIMEOUT = 1, 3
    make_namespace("support")
    _, _ = make_client("operator-1", "operator")
    from rms.models import ApiClient

    operator = ApiClient.objects.get(name="operator-1")
    queue = f"rms-kill-{uuid.uuid4().hex[:10]}"
    url = subprocess_database_url()
    log = tmp_path / "worker.log"
    first = start_worker(queue, log, database_url=url, **HEARTBEAT)
    second = None
    try:
        with tasks_sent_to(queue):
            run = runs.task_start(
                client=operator,
                kind="stability_simulation",
                params={"sessions": 1000, "corpus_size": 1000, "injected_per_session": 100},
            )

            def midway():
                r = TaskRun.objects.get(pk=run.pk)
                return r.state == "running" and 0.05 <= r.progress < 0.5 and r

            wait_until(midway, 60, "the run midway", (log.read_text,))
            os.killpg(first.proc.pid, signal.SIGKILL)  # main process and any child
            first.proc.wait(10)
            killed_at = time.monotonic()
            crashed = TaskRun.objects.get(pk=run.pk)
            assert (crashed.state, crashed.attempts) == ("running", 1)

            second = start_worker(queue, log, database_url=url, **HEARTBEAT)
            requeued_after = None
            while True:  # beat's reconciler, every second, as RMS_RECONCILE_EVERY=1 would run it
                if tasks.reconcile_task_runs.run()["requeued"] and requeued_after is None:
                    requeued_after = time.monotonic() - killed_at
                r = TaskRun.objects.get(pk=run.pk)
                if r.state in ("succeeded", "failed"):
                    break
                second.check_alive()
                if time.monotonic() - killed_at > 90:
                    pytest.fail(f"run still {r.state}:\n{second.log_tail()}")
                time.sleep(1)
    finally:
        for w in (first, second):
            if w is not None:
                stop_worker(w)
    done = TaskRun.objects.get(pk=run.pk)
    assert (done.state, done.attempts, done.progress) == ("succeeded", 2, 1.0), done.error
    assert done.result["passed"] in (True, False) and done.result["seed"] == run.params["seed"]
    # detected once the heartbeat was older than its timeout (3 s), at the next round (≤ 1 s)
    assert requeued_after is not None and requeued_after <= 3 + 1 + 2, requeued_after


def test_stop_helper_is_safe_on_a_finished_process():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stop(proc)
    assert proc.returncode == 0
