"""GET /metrics: who may read it, the exposition format, and counters that move by
exactly what was ingested."""

from __future__ import annotations

import ipaddress
import uuid

import pytest
from django.conf import settings
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from taskruns import runs, tasks
from tests.factories import samples, scrape, value


def test_anonymous_is_401_and_a_client_403(anon_api, client_api):
    resp = anon_api.get("/metrics")
    assert resp.status_code == 401
    assert resp["WWW-Authenticate"] == "Token"
    assert resp.json()["error"]["code"] == "not_authenticated"
    resp = client_api.get("/metrics")
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "forbidden"


def test_operator_and_admin_read_it(operator_api, admin_api):
    assert "rms_sessions_ingested_total" in {name for name, _ in scrape(operator_api)}
    assert scrape(admin_api)


@override_settings(RMS_METRICS_ALLOW_IPS=[ipaddress.ip_network("10.20.0.0/16")])
def test_an_allowed_address_needs_no_token(anon_api, db):
    assert scrape(anon_api, REMOTE_ADDR="10.20.3.4")
    assert anon_api.get("/metrics", REMOTE_ADDR="10.21.3.4").status_code == 401


def session(request_id: str, object_ids: list[str], signals: int) -> dict:
    return {
        "session_id": "conv",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 10,
        "injections": [{"object_id": oid, "token_cost": 10} for oid in object_ids],
        "signals": [
            {"object_id": oid, "signal_type": "REFERENCED"} for oid in object_ids[:signals]
        ],
    }


@pytest.mark.django_db
def test_counters_move_by_what_was_ingested(client_api, operator_api):
    objs = client_api.post(
        "/api/v1/objects",
        [
            {"namespace": "support", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
            for i in range(3)
        ],
        format="json",
    ).json()
    ids = [o["id"] for o in objs]
    before = scrape(operator_api)

    assert (
        client_api.post(
            "/api/v1/feedback-sessions", session("r1", ids, 2), format="json"
        ).status_code
        == 201
    )
    assert (
        client_api.post(
            "/api/v1/feedback-sessions", session("r1", ids, 2), format="json"
        ).status_code
        == 200
    )
    signal = {"signal_type": "CONFIRMED", "session_id": "s", "request_id": str(uuid.uuid4())}
    assert (
        client_api.post(f"/api/v1/objects/{ids[0]}/signals", signal, format="json").status_code
        == 201
    )
    assert (
        client_api.post(f"/api/v1/objects/{ids[0]}/signals", signal, format="json").status_code
        == 200
    )
    batch = [
        session("r2", ids, 3),  # 201
        session("r1", ids, 2),  # 200: an identical retry
        session("r1", ids[:1], 1),  # 409: the same key, another body
        {"request_id": "r3"},  # 400
        session("r4", ids[:2], 1),  # 201
    ]
    resp = client_api.post("/api/v1/feedback-sessions/batch", batch, format="json")
    assert [r["status"] for r in resp.json()["results"]] == [201, 200, 409, 400, 201]

    after = scrape(operator_api)

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("rms_sessions_ingested_total") == 3
    assert moved("rms_signals_ingested_total", source="session") == 2 + 3 + 1
    assert moved("rms_signals_ingested_total", source="endpoint") == 1
    for status, n in (("201", 2), ("200", 1), ("409", 1), ("400", 1)):
        assert moved("rms_batch_items_total", status=status) == n
    latency = "rms_http_request_duration_seconds_count"
    assert moved(latency, endpoint="feedback-sessions", method="POST", status="201") == 1
    assert moved(latency, endpoint="feedback-sessions", method="POST", status="200") == 1
    assert moved(latency, endpoint="feedback-sessions-batch", method="POST", status="207") == 1
    assert moved(latency, endpoint="object-signals", method="POST", status="201") == 1


@pytest.mark.django_db
def test_task_runs_by_kind_and_state_are_read_at_scrape_time(operator_api, monkeypatch):
    monkeypatch.setattr(runs, "enqueue", lambda run: None)
    for _ in range(2):
        resp = operator_api.post("/api/v1/tasks", {"kind": "verify_chain"}, format="json")
        assert resp.status_code == 202
    found = scrape(operator_api)
    assert value(found, "rms_task_runs", kind="verify_chain", state="queued") == 2
    assert value(found, "rms_task_runs", kind="verify_chain", state="running") == 0


@pytest.mark.django_db
def test_sweep_and_rebuild_durations_are_observed(operator_api, admin_api, namespace):
    before = scrape(operator_api)
    for kind in ("ignored_sweep", "rebuild_aggregates"):  # fanned out: observed when finalised
        run = runs.task_start(client=admin_api.row, kind=kind, params={})
        assert tasks.run_task.run(str(run.pk)) == "succeeded"
    after = scrape(operator_api)
    for name in ("rms_sweep_duration_seconds_count", "rms_rebuild_duration_seconds_count"):
        assert value(after, name) - value(before, name) == 1


@pytest.mark.django_db
def test_queue_depth_from_the_embedded_broker_and_absent_when_unreadable(operator_api, tmp_path):
    for i in range(2):
        (tmp_path / f"{i}.msg").write_text("{}")
    options = {"data_folder_in": str(tmp_path)}
    with override_settings(CELERY_BROKER_IS_EMBEDDED=True, CELERY_BROKER_TRANSPORT_OPTIONS=options):
        assert value(scrape(operator_api), "rms_queue_depth") == 2
    options = {"data_folder_in": str(tmp_path / "gone")}
    with override_settings(CELERY_BROKER_IS_EMBEDDED=True, CELERY_BROKER_TRANSPORT_OPTIONS=options):
        assert ("rms_queue_depth", ()) not in scrape(operator_api)


@pytest.mark.django_db
def test_a_broker_that_is_down_leaves_the_gauge_out(operator_api, monkeypatch):
    from rms.celery import app

    monkeypatch.setattr(settings, "CELERY_BROKER_IS_EMBEDDED", False)
    # Nothing listens on port 1: the connection is refused.
    monkeypatch.setattr(app, "connection_for_read", lambda: app.connection("redis://127.0.0.1:1/0"))
    resp = operator_api.get("/metrics")
    assert resp.status_code == 200
    found = samples(resp.content.decode())
    assert ("rms_queue_depth", ()) not in found
    assert "rms_sessions_ingested_total" in {name for name, _ in found}


@pytest.mark.redis
@pytest.mark.django_db
def test_queue_depth_is_the_redis_queue_length(operator_api):
    from rms.celery import app

    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        assert value(scrape(operator_api), "rms_queue_depth") == 0
        with app.connection_for_write() as conn:
            simple = conn.SimpleQueue(queue)
            for i in range(3):
                simple.put({"n": i})
            assert value(scrape(operator_api), "rms_queue_depth") == 3
            simple.clear()
            simple.close()
    finally:
        app.conf.task_default_queue = previous


@pytest.mark.django_db(transaction=True)
def test_metrics_sum_every_gunicorn_worker_in_multiprocess_mode(tmp_path, client_api, operator_api):
    """As ``make run`` serves: two gunicorn workers, one multiprocess folder; every scrape,
    whichever worker answers it, counts the sessions both workers ingested."""
    import http.client
    import json as json_

    from tests.servers import gunicorn

    folder = tmp_path / "prometheus"
    folder.mkdir()
    oid = client_api.post(
        "/api/v1/objects",
        {"namespace": "support", "content": "x", "epistemic_type": "ASSERTED"},
        format="json",
    ).json()["id"]
    client_token = client_api._credentials["HTTP_AUTHORIZATION"]
    operator_token = operator_api._credentials["HTTP_AUTHORIZATION"]
    args = ("-w", "2", "-c", "python:rms.gunicorn_conf")
    with gunicorn(tmp_path, args=args, PROMETHEUS_MULTIPROC_DIR=str(folder)) as server:

        def call(method, path, token, body=None):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request(
                method, path, body=None if body is None else json_.dumps(body),
                headers={"Authorization": token, "Content-Type": "application/json"},
            )  # fmt: skip
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp.status, data

        for n in range(12):  # a new connection each: the kernel spreads them over both workers
            body = {"session_id": f"m-{n}", "request_id": f"m-{n}",
                    "namespace_scope": ["support"], "context_budget": 100, "tokens_used": 5,
                    "injections": [{"object_id": oid, "token_cost": 5}]}  # fmt: skip
            status, _ = call("POST", "/api/v1/feedback-sessions", client_token, body)
            assert status == 201
        for _ in range(4):
            status, text = call("GET", "/metrics", operator_token)
            assert status == 200
            values = {
                s.name: s.value
                for family in text_string_to_metric_families(text.decode())
                for s in family.samples
            }
            assert values["rms_sessions_ingested_total"] == 12
    assert len(list(folder.glob("*.db"))) >= 2  # both workers wrote their samples


@pytest.mark.django_db(transaction=True)
def test_a_fresh_deployment_answers_the_text_format_to_an_accept_text_plain_scrape(
    tmp_path, operator_api
):
    """Started as ``make run`` and compose start the web process (gthread workers, the gunicorn
    hooks, a fresh multiprocess folder, DEBUG off): a scraper that asks for ``text/plain`` (or
    Prometheus's own Accept header) gets the text exposition; an error stays the contract's JSON
    whatever the Accept header."""
    import http.client
    import json as json_

    from tests.servers import gunicorn

    folder = tmp_path / "prometheus"
    folder.mkdir()
    token = operator_api._credentials["HTTP_AUTHORIZATION"]
    args = ("-w", "2", "--threads", "4", "-c", "python:rms.gunicorn_conf")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(folder), "DEBUG": "false", "SECRET_KEY": "x" * 50}
    with gunicorn(tmp_path, args=args, **env) as server:

        def get(headers):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", "/metrics", headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp, data

        for accept in (
            "text/plain",
            "text/plain;version=0.0.4",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        ):
            resp, data = get({"Authorization": token, "Accept": accept})
            assert resp.status == 200, (accept, data)
            assert resp.getheader("Content-Type").startswith("text/plain; version=0.0.4")
            assert "rms_sessions_ingested_total" in {name for name, _ in samples(data.decode())}
        resp, data = get({"Accept": "text/plain"})
        assert resp.status == 401
        assert resp.getheader("Content-Type") == "application/json"
        assert json_.loads(data)["error"]["code"] == "not_authenticated"
