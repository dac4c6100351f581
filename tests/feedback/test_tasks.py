"""Worker tasks (API.md tasks, STYLE §6–§8): through a real worker, called directly, and rerun
after a crash.

The worker tests start ``celery -A rms worker --pool solo`` (``celery_worker`` in conftest) on
the broker the settings choose: the embedded filesystem transport on SQLite runs, Redis when
REDIS_URL is set. Everything else calls the task functions in this process.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from celery.exceptions import SoftTimeLimitExceeded
from django.db import OperationalError, transaction

from feedback import rebuild, simulations
from feedback import sweep as sweep_mod
from feedback.models import (
    FeedbackAggregate,
    FeedbackSession,
    MetricSnapshot,
)
from rms import verification
from rms.errors import DomainError, Forbidden
from rms.models import GENESIS_HASH, MemoryObject, Namespace, Operation
from taskruns import claims, enqueue, heartbeat, kinds, runs, tasks
from taskruns.models import TaskChunk, TaskRun
from tests.factories import (
    build_log,
    go_stale,
    make_namespace,
    make_objects,
    post,
    queued,
    same_aggregates,
    session,
    start,
)
from tests.feedback.conftest import ROOT, wait_for_task

T0 = datetime(2026, 6, 1, tzinfo=UTC)
OPERATOR_KINDS = [
    "verify_replay",
    "verify_chain",
    "stability_simulation",
    "precision_simulation",
    "benchmark_suite",
]
ADMIN_KINDS = ["ignored_sweep", "rebuild_aggregates"]


def tamper_payload(op: Operation) -> None:
    Operation.objects.filter(seq=op.seq).update(payload={**op.payload, "tampered": True})


def aggregate_values(object_ids=None) -> dict:
    qs = FeedbackAggregate.objects.all()
    if object_ids is not None:
        qs = qs.filter(object_id__in=object_ids)
    return {row.object_id: row for row in qs}


# --- (a) every kind end to end, through the API and a real worker -------------------------------


@pytest.mark.django_db(transaction=True)
class TestThroughARealWorker:
    def test_stability_simulation_reports_progress_then_its_result(
        self, celery_worker, operator_api
    ):
        # ~1000 x 1000 takes seconds: long enough to see throttled progress writes land.
        params = {"seed": 7, "sessions": 1000, "corpus_size": 1000, "injected_per_session": 8}
        resp = start(operator_api, "stability_simulation", params)
        assert resp.status_code == 202, resp.content
        assert resp.json()["state"] == "queued"
        seen: list = []
        body = wait_for_task(operator_api, celery_worker, resp.json()["id"], seen=seen)
        assert body["state"] == "succeeded", body["error"]
        assert body["progress"] == 1.0
        intermediate = [p for state, p in seen if state == "running" and 0 < p < 1]
        assert intermediate, seen
        assert intermediate == sorted(intermediate)  # never goes backwards
        result = body["result"]
        assert {"passed", "criterion", "series", "seed"} <= set(result)
        assert result["seed"] == 7 and len(result["series"]) == 1000
        assert isinstance(result["passed"], bool) and result["criterion"]
        assert body["params"]["streak_threshold"] == 5  # defaults are filled in and shown
        assert body["started_at"] and body["finished_at"] and body["error"] is None

    def test_precision_simulation_result_has_the_api_shape(self, celery_worker, operator_api):
        resp = start(operator_api, "precision_simulation", {"seed": 42})
        body = wait_for_task(operator_api, celery_worker, resp.json()["id"])
        assert body["state"] == "succeeded", body["error"]
        result = body["result"]
        assert {"precision_at_5_session_1", "precision_at_5_session_50", "series", "seed"} <= set(
            result
        )
        assert result["precision_at_5_session_50"] > result["precision_at_5_session_1"]
        assert len(result["series"]) == 50 and result["seed"] == 42

    def test_benchmark_suite_passes_on_the_worker(self, celery_worker, operator_api):
        body = wait_for_task(
            operator_api, celery_worker, start(operator_api, "benchmark_suite").json()["id"]
        )
        assert body["state"] == "succeeded", body["error"]
        assert body["result"]["passed"] is True
        assert len(body["result"]["checks"]) == 5

    def test_verify_replay_and_chain_on_a_clean_log(self, celery_worker, operator_api, client_api):
        build_log(client_api, objects=3, sessions=2)
        for kind in ("verify_replay", "verify_chain"):
            body = wait_for_task(
                operator_api, celery_worker, start(operator_api, kind).json()["id"]
            )
            assert body["state"] == "succeeded", body["error"]
            assert body["result"]["ok"] is True and body["result"]["mismatches"] == []
        assert body["result"]["checked"] == 3 + 2 + 1  # objects + sessions + the namespace
        assert body["result"]["operations"] == Operation.objects.count()

    def test_verify_after_tampering_reports_the_broken_link(
        self, celery_worker, operator_api, client_api
    ):
        ids = build_log(client_api, objects=2, sessions=2)
        target = Operation.objects.filter(target_id=ids[1]).order_by("seq")[1]
        tamper_payload(target)
        body = wait_for_task(
            operator_api, celery_worker, start(operator_api, "verify_chain").json()["id"]
        )
        assert body["state"] == "succeeded"  # a broken chain is a result, not a failure
        assert body["result"]["ok"] is False
        assert body["result"]["mismatches"] == [
            {
                "target_id": ids[1],
                "target_type": "memory_object",
                "seq": target.seq,
                "reason": "hash does not match the operation's content",
            }
        ]

    def test_rebuild_aggregates_repairs_a_damaged_aggregate(
        self, celery_worker, admin_api, client_api
    ):
        ids = build_log(client_api, objects=2, sessions=2)
        before = aggregate_values()
        FeedbackAggregate.objects.filter(object_id=ids[0]).update(total_injections=99, utility=0.0)
        body = wait_for_task(
            admin_api,
            celery_worker,
            start(admin_api, "rebuild_aggregates", {"namespace": "support"}).json()["id"],
        )
        assert body["state"] == "succeeded", body["error"]
        result = body["result"]
        assert result == {"objects": 2, "changed": 1, "namespace": "support", "chunks": 1,
                          "workers": result["workers"]}  # fmt: skip
        assert len(result["workers"]) == 1 and result["workers"][0].startswith(celery_worker.queue)
        assert same_aggregates(aggregate_values(), before)

    def test_ignored_sweep_penalizes_a_repeatedly_ignored_object(
        self, celery_worker, admin_api, client_api, monkeypatch
    ):
        # The after-session trigger is off here, so the candidate waits for this sweep.
        monkeypatch.setattr(enqueue, "sweep_objects", lambda ids: None)
        (oid,) = make_objects(client_api, 1)
        for hour in range(1, 6):
            assert (
                post(client_api, session(f"ign-{hour}", [(oid, 10)], hours=hour)).status_code == 201
            )
        assert FeedbackAggregate.objects.get(object_id=oid).unused_streak == 5
        body = wait_for_task(
            admin_api, celery_worker, start(admin_api, "ignored_sweep", {}).json()["id"]
        )
        assert body["state"] == "succeeded", body["error"]
        assert body["result"]["examined"] == 1 and body["result"]["penalized"] == 1
        ops = list(Operation.objects.filter(target_id=oid).values_list("op_type", flat=True))
        assert ops[-3:] == ["IGNORED_CHECK", "FEEDBACK_EVENT", "PENALTY"]

    def test_sessions_enqueue_sweep_objects_which_the_worker_runs(
        self, celery_worker, operator_api, client_api
    ):
        (oid,) = make_objects(client_api, 1)
        for hour in range(1, 6):
            post(client_api, session(f"trig-{hour}", [(oid, 10)], hours=hour))
        deadline = time.monotonic() + 60
        while not Operation.objects.filter(target_id=oid, op_type="IGNORED_CHECK").exists():
            celery_worker.check_alive()
            assert time.monotonic() < deadline, celery_worker.log_tail()
            time.sleep(0.1)
        assert not TaskRun.objects.exists()  # sweep_objects records no TaskRun

    def test_a_namespace_deleted_after_start_fails_the_run(self, celery_worker, admin_api):
        make_namespace("short-lived")
        with transaction.atomic():  # the message goes out when this commits
            run = runs.task_start(
                client=admin_api.row, kind="rebuild_aggregates", params={"namespace": "short-lived"}
            )
            Namespace.objects.filter(name="short-lived").delete()
        body = wait_for_task(admin_api, celery_worker, str(run.pk))
        assert body["state"] == "failed"
        assert body["error"] == "Namespace 'short-lived' no longer exists."
        assert body["result"] is None and body["finished_at"]


# --- (b) without a worker: the API, roles, params, claiming and the domain results --------------


@pytest.mark.django_db
class TestStartingTasks:
    def test_start_answers_202_with_the_queued_task_and_enqueues_after_commit(
        self, operator_api, monkeypatch, django_capture_on_commit_callbacks
    ):
        sent = []
        monkeypatch.setattr(tasks.run_task, "apply_async", lambda args, **kw: sent.append(args[0]))
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            resp = start(operator_api, "precision_simulation", {"seed": 3})
        assert resp.status_code == 202
        body = resp.json()
        assert set(body) >= {
            "id", "kind", "state", "progress", "result", "error", "params",
            "created_at", "started_at", "finished_at",
        }  # fmt: skip
        assert (body["state"], body["progress"], body["result"]) == ("queued", 0.0, None)
        assert body["params"]["seed"] == 3 and body["params"]["sessions"] == 50
        assert body["created_by"] == "operator-1"
        assert sent == []  # nothing is sent before the commit
        assert TaskRun.objects.get(pk=body["id"]).sent_at is None
        for callback in callbacks:
            callback()
        assert sent == [body["id"]]
        assert TaskRun.objects.get(pk=body["id"]).sent_at is not None

    @pytest.mark.parametrize("kind", OPERATOR_KINDS)
    def test_operators_start_verifications_and_simulations(self, operator_api, kind):
        assert start(operator_api, kind).status_code == 202

    @pytest.mark.parametrize("kind", OPERATOR_KINDS + ADMIN_KINDS)
    def test_admins_start_every_kind(self, admin_api, kind):
        assert start(admin_api, kind).status_code == 202

    @pytest.mark.parametrize("kind", ADMIN_KINDS)
    def test_operators_may_not_start_sweeps_or_rebuilds(self, operator_api, kind):
        resp = start(operator_api, kind)
        assert resp.status_code == 403
        assert resp.json()["error"]["code"] == "forbidden"
        with pytest.raises(Forbidden):
            runs.task_start(client=operator_api.row, kind=kind, params={})
        assert not TaskRun.objects.exists()

    def test_clients_may_not_start_or_read_tasks(self, client_api, operator_api):
        assert start(client_api, "verify_chain").status_code == 403
        with pytest.raises(Forbidden):
            runs.task_start(client=client_api.row, kind="verify_chain", params={})
        run_id = start(operator_api, "verify_chain").json()["id"]
        assert client_api.get(f"/api/v1/tasks/{run_id}").status_code == 403
        assert client_api.get("/api/v1/tasks").status_code == 403

    def test_no_token_is_401(self, anon_api):
        assert (
            anon_api.post("/api/v1/tasks", {"kind": "verify_chain"}, format="json").status_code
            == 401
        )

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"kind": "nightly_backup"}, "kind"),
            ({"kind": 7}, "kind"),
            ({}, "kind"),
            ({"kind": "verify_chain", "priority": 1}, "priority"),
            ({"kind": "verify_chain", "params": [1]}, "params"),
        ],
    )
    def test_unknown_or_missing_kind_and_bad_bodies_are_400(self, operator_api, body, field):
        resp = operator_api.post("/api/v1/tasks", body, format="json")
        assert resp.status_code == 400, resp.content
        assert field in resp.json()["error"]["fields"]
        assert not TaskRun.objects.exists()

    @pytest.mark.parametrize(
        ("kind", "params", "field", "message"),
        [
            ("verify_chain", {"namespace": "support"}, "params.namespace", "Unknown parameter"),
            ("stability_simulation", {"sed": 1}, "params.sed", "Unknown parameter"),
            ("stability_simulation", {"seed": "42"}, "params.seed", "Must be an integer"),
            ("stability_simulation", {"seed": True}, "params.seed", "Must be an integer"),
            ("stability_simulation", {"seed": -1}, "params.seed", "between 0 and"),
            ("stability_simulation", {"sessions": 1.5}, "params.sessions", "Must be an integer"),
            ("stability_simulation", {"sessions": 0}, "params.sessions", "between 1 and 1000"),
            ("stability_simulation", {"sessions": 1001}, "params.sessions", "between 1 and 1000"),
            ("stability_simulation", {"corpus_size": 10**6}, "params.corpus_size", "between"),
            (
                "stability_simulation",
                {"corpus_size": 5, "injected_per_session": 6},
                "params.injected_per_session",
                "Must not exceed corpus_size",
            ),
            (
                "precision_simulation",
                {"confirm_probability": 1.5},
                "params.confirm_probability",
                "between 0 and 1",
            ),
            (
                "precision_simulation",
                {"confirm_probability": "high"},
                "params.confirm_probability",
                "Must be a number",
            ),
            (
                "precision_simulation",
                {"relevant": 1, "wrong": 1, "filler": 1},
                "params.filler",
                "at least 5",
            ),
            ("benchmark_suite", {"sessions": 5}, "params.sessions", "Unknown parameter"),
            (
                "rebuild_aggregates",
                {"namespace": "nowhere"},
                "params.namespace",
                "Unknown namespace 'nowhere'",
            ),
            ("ignored_sweep", {"namespace": 3}, "params.namespace", "Must be a namespace name"),
        ],
    )
    def test_bad_params_are_400_with_the_field(self, admin_api, kind, params, field, message):
        resp = start(admin_api, kind, params)
        assert resp.status_code == 400, resp.content
        error = resp.json()["error"]
        assert error["code"] == "validation_error"
        assert message in error["fields"][field][0], error
        assert not TaskRun.objects.exists()

    def test_every_bad_param_is_reported_at_once(self, operator_api):
        resp = start(operator_api, "stability_simulation", {"seed": "x", "sessions": 0, "foo": 1})
        assert set(resp.json()["error"]["fields"]) == {
            "params.seed",
            "params.sessions",
            "params.foo",
        }

    def test_integral_floats_are_accepted_as_integers(self, operator_api):
        resp = start(operator_api, "stability_simulation", {"seed": 5.0, "sessions": 10.0})
        assert resp.status_code == 202
        assert resp.json()["params"]["seed"] == 5 and resp.json()["params"]["sessions"] == 10


@pytest.mark.django_db
class TestReadingTasks:
    def test_detail_has_every_field_and_unknown_or_malformed_ids_are_404(self, operator_api):
        run_id = start(operator_api, "verify_replay").json()["id"]
        body = operator_api.get(f"/api/v1/tasks/{run_id}").json()
        assert body["id"] == run_id and body["kind"] == "verify_replay"
        assert body["state"] == "queued" and body["params"] == {"chunk_size": 1000}
        assert operator_api.get(f"/api/v1/tasks/{uuid.uuid4()}").status_code == 404
        resp = operator_api.get("/api/v1/tasks/not-a-uuid")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"

    def test_list_is_newest_first_filtered_and_paginated(self, admin_api):
        ids = []
        for i, kind in enumerate(
            ["verify_chain", "verify_replay", "verify_chain", "benchmark_suite"]
        ):
            ids.append(start(admin_api, kind).json()["id"])
            # distinct creation times: the order under test is not left to a tie on the clock
            TaskRun.objects.filter(pk=ids[-1]).update(created_at=T0 + timedelta(minutes=i))
        TaskRun.objects.filter(pk=ids[0]).update(state=TaskRun.SUCCEEDED)
        body = admin_api.get("/api/v1/tasks").json()
        assert [r["id"] for r in body["results"]] == ids[::-1] and body["next"] is None
        chains = admin_api.get("/api/v1/tasks?kind=verify_chain").json()["results"]
        assert [r["id"] for r in chains] == [ids[2], ids[0]]
        done = admin_api.get("/api/v1/tasks?state=succeeded").json()["results"]
        assert [r["id"] for r in done] == [ids[0]]
        first = admin_api.get("/api/v1/tasks?page_size=3").json()
        assert [r["id"] for r in first["results"]] == ids[:0:-1]
        second = admin_api.get(first["next"]).json()
        assert [r["id"] for r in second["results"]] == [ids[0]] and second["next"] is None

    @pytest.mark.parametrize("query", ["kind=nightly", "state=done", "cursor=zzz", "page_size=0"])
    def test_bad_list_filters_are_400(self, operator_api, query):
        assert operator_api.get(f"/api/v1/tasks?{query}").status_code == 400


@pytest.mark.django_db
class TestRunTask:
    def test_a_run_is_claimed_once_then_left_alone(self, operator_api):
        run = queued(operator_api.row, "precision_simulation", {"sessions": 5})
        assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
        done = TaskRun.objects.get(pk=run.pk)
        assert (done.state, done.progress, done.attempts) == ("succeeded", 1.0, 1)
        # a second delivery of the same message changes nothing
        assert tasks.run_task.run(str(run.pk)) is None
        again = TaskRun.objects.get(pk=run.pk)
        assert (again.attempts, again.finished_at, again.result) == (
            1,
            done.finished_at,
            done.result,
        )

    def test_a_failed_run_is_not_run_again(self, operator_api):
        run = queued(operator_api.row, "benchmark_suite")
        TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.FAILED, error="earlier")
        assert tasks.run_task.run(str(run.pk)) is None
        assert TaskRun.objects.get(pk=run.pk).error == "earlier"

    def test_a_running_run_is_claimed_again_after_a_lost_worker(self, operator_api):
        run = queued(operator_api.row, "precision_simulation", {"sessions": 5})
        TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING, attempts=1, progress=0.4)
        assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
        assert TaskRun.objects.get(pk=run.pk).attempts == 2

    def test_a_run_that_keeps_killing_its_worker_is_given_up(self, operator_api):
        run = queued(operator_api.row, "benchmark_suite")
        TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING, attempts=tasks.MAX_ATTEMPTS)
        assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
        assert "Gave up after" in TaskRun.objects.get(pk=run.pk).error

    @pytest.mark.parametrize("task_id", ["nope", str(uuid.uuid4())])
    def test_unknown_or_malformed_ids_do_nothing(self, task_id):
        assert tasks.run_task.run(task_id) is None

    def test_the_task_options_make_delivery_safe(self):
        task = tasks.run_task
        assert task.acks_late and task.reject_on_worker_lost
        assert task.max_retries == 3
        assert 0 < task.soft_time_limit < task.time_limit

    def test_a_soft_time_limit_fails_the_run(self, operator_api, monkeypatch):
        def slow(params, progress):
            raise SoftTimeLimitExceeded()

        monkeypatch.setitem(
            kinds.KINDS, "benchmark_suite", replace(kinds.KINDS["benchmark_suite"], run=slow)
        )
        run = queued(operator_api.row, "benchmark_suite")
        assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
        done = TaskRun.objects.get(pk=run.pk)
        assert done.error == "time limit exceeded" and done.finished_at and done.result is None

    def test_an_unexpected_error_fails_the_run_with_its_message(self, operator_api, monkeypatch):
        def broken(params, progress):
            raise ValueError("corpus exploded")

        monkeypatch.setitem(
            kinds.KINDS, "benchmark_suite", replace(kinds.KINDS["benchmark_suite"], run=broken)
        )
        run = queued(operator_api.row, "benchmark_suite")
        assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
        assert TaskRun.objects.get(pk=run.pk).error == "ValueError: corpus exploded"

    def test_a_transient_database_error_is_retried_then_succeeds(self, operator_api, monkeypatch):
        calls = []

        def flaky(params, progress):
            calls.append(1)
            if len(calls) == 1:
                raise OperationalError("server closed the connection unexpectedly")
            return {"ok": True}

        monkeypatch.setitem(
            kinds.KINDS, "benchmark_suite", replace(kinds.KINDS["benchmark_suite"], run=flaky)
        )
        run = queued(operator_api.row, "benchmark_suite")
        tasks.run_task.apply(args=[str(run.pk)])  # in process, with a real retry request
        done = TaskRun.objects.get(pk=run.pk)
        assert (done.state, done.attempts, done.result) == ("succeeded", 2, {"ok": True})

    def test_retries_stop_after_three_and_fail_the_run(self, operator_api, monkeypatch):
        def down(params, progress):
            raise OperationalError("could not connect to server")

        monkeypatch.setitem(
            kinds.KINDS, "benchmark_suite", replace(kinds.KINDS["benchmark_suite"], run=down)
        )
        run = queued(operator_api.row, "benchmark_suite")
        tasks.run_task.apply(args=[str(run.pk)])
        done = TaskRun.objects.get(pk=run.pk)
        assert (done.state, done.attempts) == ("failed", 4)
        assert done.error.startswith("Database error after 3 retries")

    def test_same_seed_same_result_other_seed_other_result(self, operator_api):
        results = []
        for seed in (11, 11, 12):
            run = queued(operator_api.row, "stability_simulation", {"seed": seed, "sessions": 30})
            tasks.run_task.run(str(run.pk))
            results.append(TaskRun.objects.get(pk=run.pk).result)
        assert results[0] == results[1]
        assert results[0] != results[2]
        # and equal to calling the pure function: the task adds nothing but JSON
        assert results[0] == simulations.stability_simulation(11, sessions=30)

    def test_precision_and_benchmark_results_are_reproducible(self, operator_api):
        for kind in ("precision_simulation", "benchmark_suite"):
            a, b = (queued(operator_api.row, kind, {"seed": 5}) for _ in range(2))
            tasks.run_task.run(str(a.pk))
            tasks.run_task.run(str(b.pk))
            a.refresh_from_db()
            b.refresh_from_db()
            assert a.result == b.result and a.result["seed"] == 5


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.django_db
def test_progress_writes_are_throttled_and_never_go_back(operator_api, monkeypatch):
    run = queued(operator_api.row, "benchmark_suite")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    clock = FakeClock()
    writer = heartbeat.ProgressWriter(run.pk, clock=clock)
    for k in range(1, 101):  # 100 calls of +0.01 within no time: a write per 0.02
        writer(k / 100)
    assert writer.writes == 50
    writer(0.5)  # backwards: ignored
    assert TaskRun.objects.get(pk=run.pk).progress == 1.0
    slow = heartbeat.ProgressWriter(run.pk, clock=clock)
    slow(0.01)
    assert slow.writes == 0  # small step, no time passed
    clock.now += heartbeat.PROGRESS_INTERVAL
    slow(0.02)
    assert slow.writes == 1  # small step, but half a second later
    assert TaskRun.objects.get(pk=run.pk).progress == 0.02


# --- verification over the whole log -------------------------------------------------------------


@pytest.mark.django_db
class TestVerification:
    def session_heads(self):
        return list(FeedbackSession.objects.values_list("pk", "head_hash"))

    def test_a_clean_log_verifies(self, client_api):
        build_log(client_api, objects=4, sessions=3)
        seen = []
        replay = verification.verify_replay_all(progress=seen.append)
        assert replay["ok"] and replay["checked"] == 4 and seen[-1] == 1.0
        assert replay["operations"] == Operation.objects.filter(target_type="memory_object").count()
        chain = verification.verify_chain_all(extra_heads=self.session_heads(), extra_total=3)
        # 4 objects + 3 sessions + the namespace's own (alert) chain.
        assert chain["ok"] and chain["checked"] == 8
        assert chain["operations"] == Operation.objects.count()
        assert chain["mismatch_count"] == 0 and chain["truncated"] is False

    def test_small_chunks_give_the_same_answer(self, client_api, monkeypatch):
        build_log(client_api, objects=5, sessions=2)
        whole = verification.verify_chain_all(extra_heads=self.session_heads())
        monkeypatch.setattr(verification, "CHUNK", 2)
        monkeypatch.setattr(verification, "BATCH", 3)
        assert verification.verify_chain_all(extra_heads=iter(self.session_heads())) == whole
        assert verification.verify_replay_all()["checked"] == 5

    def test_a_changed_payload_breaks_the_chain_at_that_operation(self, client_api):
        ids = build_log(client_api)
        op = Operation.objects.filter(target_id=ids[2], op_type="INJECTION_EVENT").first()
        tamper_payload(op)
        chain = verification.verify_chain_all()
        assert not chain["ok"]
        assert chain["mismatches"] == [
            {
                "target_id": ids[2],
                "target_type": "memory_object",
                "seq": op.seq,
                "reason": "hash does not match the operation's content",
            }
        ]

    def test_a_changed_stored_state_fails_chain_and_replay(self, client_api):
        ids = build_log(client_api)
        op = Operation.objects.filter(target_id=ids[0], op_type="REINFORCE").first()
        Operation.objects.filter(seq=op.seq).update(state={**op.state, "confidence": 0.01})
        replay = verification.verify_replay_all()
        assert replay["mismatches"] == [
            {
                "object_id": ids[0],
                "seq": op.seq,
                "op_type": "REINFORCE",
                "where": "stored state",
                "fields": ["confidence"],
            }
        ]
        assert verification.verify_chain_all()["mismatches"][0]["seq"] == op.seq

    def test_a_changed_object_row_fails_replay(self, client_api):
        ids = build_log(client_api)
        MemoryObject.objects.filter(pk=ids[1]).update(confidence=0.5)
        replay = verification.verify_replay_all()
        assert replay["mismatches"] == [
            {"object_id": ids[1], "seq": None, "where": "object row", "fields": ["confidence"]}
        ]

    def test_a_removed_operation_and_a_truncated_tail_are_found(self, client_api):
        ids = build_log(client_api)
        middle = list(Operation.objects.filter(target_id=ids[0]).order_by("seq"))
        middle[3].delete()
        last = Operation.objects.filter(target_id=ids[1]).order_by("-seq").first()
        last.delete()
        chain = verification.verify_chain_all()
        by_target = {m["target_id"]: m for m in chain["mismatches"]}
        assert by_target[ids[0]]["seq"] == middle[4].seq
        assert by_target[ids[0]]["reason"].startswith("prev_hash")
        assert by_target[ids[1]]["reason"].startswith("the target's head hash")
        assert chain["mismatch_count"] == 2  # one per target, the first broken link

    def test_a_changed_feedback_session_operation_is_found(self, client_api):
        build_log(client_api)
        op = Operation.objects.filter(op_type="FEEDBACK_SESSION").order_by("seq").first()
        tamper_payload(op)
        chain = verification.verify_chain_all(extra_heads=self.session_heads())
        assert [(m["target_id"], m["target_type"], m["seq"]) for m in chain["mismatches"]] == [
            (str(op.target_id), "feedback_session", op.seq)
        ]
        # the objects' check alone does not see it: sessions are their own chains
        assert verification.verify_chain_all()["ok"]

    def test_a_broken_fold_is_reported_not_raised(self, client_api):
        ids = build_log(client_api)
        op = Operation.objects.filter(target_id=ids[0], op_type="REINFORCE").first()
        Operation.objects.filter(seq=op.seq).update(payload={"signal_type": "CONFIRMED"})
        replay = verification.verify_replay_all()
        assert replay["mismatches"][0]["where"] == "replay"
        assert replay["mismatches"][0]["seq"] == op.seq
        assert replay["operations"] == Operation.objects.filter(target_type="memory_object").count()

    def test_objects_without_operations_are_mismatches(self, client_api):
        ids = build_log(client_api, objects=2, sessions=1)
        Operation.objects.filter(target_id=ids[0]).delete()
        assert verification.verify_replay_all()["mismatches"] == [
            {"object_id": ids[0], "seq": None, "where": "no OBJECT_CREATED operation"}
        ]
        chain = verification.verify_chain_all()
        assert chain["mismatches"][0]["target_id"] == ids[0]
        MemoryObject.objects.filter(pk=ids[0]).update(head_hash=GENESIS_HASH)
        assert verification.verify_chain_all()["ok"]  # an empty chain at genesis is intact

    def test_the_list_is_capped_but_every_mismatch_is_counted(self, client_api, monkeypatch):
        monkeypatch.setattr(verification, "MAX_LISTED", 2)
        ids = build_log(client_api, objects=3, sessions=1)
        for oid in ids:
            tamper_payload(Operation.objects.filter(target_id=oid).order_by("seq").first())
        chain = verification.verify_chain_all()
        assert chain["mismatch_count"] == 3 and len(chain["mismatches"]) == 2
        assert chain["truncated"] is True and chain["ok"] is False

    def test_operations_appended_after_the_head_was_read_are_not_a_break(self, client_api):
        ids = build_log(client_api, objects=1, sessions=1)
        heads = [(ids[0], MemoryObject.objects.get(pk=ids[0]).head_hash)]
        post(client_api, session("later", [(ids[0], 5)], hours=9))  # appends to the chain
        report = verification._Report()
        verification._verify_heads([(uuid.UUID(ids[0]), "memory_object", heads[0][1])], report)
        assert report.mismatch_count == 0

    def test_verify_tasks_pass_the_session_chains(self, operator_api, client_api):
        build_log(client_api, objects=2, sessions=2)
        op = Operation.objects.filter(op_type="FEEDBACK_SESSION").first()
        tamper_payload(op)
        chain_run = queued(operator_api.row, "verify_chain")
        replay_run = queued(operator_api.row, "verify_replay")
        for run in (chain_run, replay_run):
            tasks.run_task.run(str(run.pk))
            run.refresh_from_db()
        assert chain_run.result["ok"] is False and chain_run.result["checked"] == 5
        assert chain_run.result["mismatches"][0]["target_id"] == str(op.target_id)
        assert replay_run.result["ok"] is True and replay_run.result["checked"] == 2


# --- beat tasks and the after-session sweep ------------------------------------------------------


@pytest.mark.django_db
class TestBeat:
    def test_snapshot_metrics_is_one_row_per_namespace_per_minute(
        self, client_api, other_namespace
    ):
        (oid,) = make_objects(client_api, 1)
        post(client_api, session("old", [(oid, 10)], hours=1))  # outside the 24 h window
        post(client_api, session("new", [(oid, 10)], [(oid, "REFERENCED")], hours=47))
        with time_machine.travel(T0 + timedelta(hours=48, seconds=42.5), tick=False):
            assert tasks.snapshot_metrics.run() == 2
            assert tasks.snapshot_metrics.run() == 0  # the same minute again: nothing new
        snap = MetricSnapshot.objects.get(namespace__name="support")
        assert snap.ts == T0 + timedelta(hours=48) and snap.window_hours == 24
        assert set(snap.metrics) == {
            "mean_usage_ratio",
            "high_correction_rate",
            "budget_waste_ratio",
            "unused_injection_rate",
        }
        assert snap.metrics["unused_injection_rate"]["value"] == 0.0  # only "new" counts
        empty = MetricSnapshot.objects.get(namespace__name="billing")
        assert empty.metrics["high_correction_rate"]["state"] == "no_data"
        with time_machine.travel(T0 + timedelta(hours=48, minutes=1), tick=False):
            assert tasks.snapshot_metrics.run() == 2
        assert MetricSnapshot.objects.count() == 4

    def test_sweep_all_records_what_the_sweep_decided(self, client_api):
        (oid,) = make_objects(client_api, 1)
        for hour in range(1, 6):
            post(client_api, session(f"b-{hour}", [(oid, 10)], hours=hour))
        run_id = tasks.sweep_all.run()
        run = TaskRun.objects.get(pk=run_id)
        assert (run.kind, run.created_by, run.state) == ("ignored_sweep", "beat", "succeeded")
        assert run.result["examined"] == 1 and run.result["penalized"] == 1
        # the next beat finds nothing new to examine
        nxt = TaskRun.objects.get(pk=tasks.sweep_all.run())
        assert nxt.result["examined"] == 0

    def test_sweep_all_skips_while_a_sweep_is_pending_and_fails_stale_ones(
        self, admin_api, settings
    ):
        pending = queued(admin_api.row, "ignored_sweep")
        assert tasks.sweep_all.run() is None
        assert TaskRun.objects.count() == 1
        old = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 1)
        TaskRun.objects.filter(pk=pending.pk).update(
            state=TaskRun.RUNNING, created_at=pending.created_at - old
        )
        run_id = tasks.sweep_all.run()
        assert TaskRun.objects.get(pk=run_id).state == "succeeded"
        pending.refresh_from_db()
        assert pending.state == "failed" and "lost" in pending.error

    def test_sweep_objects_sweeps_just_those_objects(self, client_api):
        a, b = make_objects(client_api, 2)
        for hour in range(1, 6):
            post(client_api, session(f"s-{hour}", [(a, 10), (b, 10)], hours=hour))
        result = tasks.sweep_objects.run([a, "not-a-uuid"])
        assert result["examined"] == 1
        assert Operation.objects.filter(target_id=a, op_type="IGNORED_CHECK").count() == 1
        assert not Operation.objects.filter(target_id=b, op_type="IGNORED_CHECK").exists()
        assert tasks.sweep_objects.run([a])["examined"] == 0  # idempotent
        assert tasks.sweep_objects.run(["junk"]) == {}

    def test_beat_schedule_defaults(self, settings):
        from rms.celery import app

        schedule = settings.CELERY_BEAT_SCHEDULE
        assert schedule["ignored-sweep"]["task"] == "feedback.tasks.sweep_all"
        assert schedule["ignored-sweep"]["schedule"] == settings.RMS_SWEEP_EVERY
        assert schedule["metric-snapshots"]["task"] == "feedback.tasks.snapshot_metrics"
        assert schedule["metric-snapshots"]["schedule"] == settings.RMS_SNAPSHOT_EVERY
        app.loader.import_default_modules()  # what a worker does at start: autodiscovery
        for entry in schedule.values():
            assert entry["task"] in app.tasks


def settings_in_subprocess(env: dict, expr: str) -> subprocess.CompletedProcess:
    code = f"import django; django.setup(); from django.conf import settings; print({expr})"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**_base_env(), "DJANGO_SETTINGS_MODULE": "rms.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _base_env() -> dict:
    import os

    return {
        k: v for k, v in os.environ.items() if k not in ("RMS_SWEEP_EVERY", "RMS_SNAPSHOT_EVERY")
    }


def test_beat_intervals_come_from_the_environment():
    expr = (
        "settings.CELERY_BEAT_SCHEDULE['ignored-sweep']['schedule'], "
        "settings.CELERY_BEAT_SCHEDULE['metric-snapshots']['schedule']"
    )
    default = settings_in_subprocess({}, expr)
    assert default.stdout.split() == ["900", "3600"], default.stderr
    custom = settings_in_subprocess({"RMS_SWEEP_EVERY": "60", "RMS_SNAPSHOT_EVERY": "120"}, expr)
    assert custom.stdout.split() == ["60", "120"], custom.stderr
    bad = settings_in_subprocess({"RMS_SWEEP_EVERY": "0"}, expr)
    assert bad.returncode != 0 and "ImproperlyConfigured" in bad.stderr
    worse = settings_in_subprocess({"RMS_SNAPSHOT_EVERY": "hourly"}, expr)
    assert worse.returncode != 0 and "ImproperlyConfigured" in worse.stderr


# --- (c) killed midway, then rerun: the same end state as one clean run -------------------------


class WorkerKilled(BaseException):
    """Stands in for the worker process dying: not an Exception, so nothing in the task catches
    it, the chunk's transaction rolls back and its row is left as a dead worker leaves it
    (running), and the message would be redelivered (``reject_on_worker_lost``)."""


def die_on_call(monkeypatch, module, name, call: int) -> None:
    """``module.name`` raises WorkerKilled on its ``call``-th call."""
    real = getattr(module, name)
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise WorkerKilled()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


@pytest.mark.django_db
def test_a_rebuild_killed_midway_and_rerun_equals_one_clean_run(client_api, admin_api, monkeypatch):
    ids = build_log(client_api, objects=4, sessions=4)
    clean = aggregate_values()
    FeedbackAggregate.objects.filter(object_id__in=ids[:2]).update(total_injections=77, uses=9)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 1})
    with monkeypatch.context() as m:
        die_on_call(m, rebuild, "rebuild_range", 2)  # in the second of four chunks
        with pytest.raises(WorkerKilled):
            tasks.run_task.run(str(run.pk))
    crashed = TaskRun.objects.get(pk=run.pk)
    assert (crashed.state, crashed.attempts, crashed.finished_at) == ("running", 1, None)
    chunks = list(TaskChunk.objects.filter(run=run).order_by("index"))
    assert [c.state for c in chunks] == ["succeeded", "running", "queued", "queued"]
    assert crashed.progress == 0.25  # one chunk of four

    # the killed chunk's heartbeat is fresh: a rerun now runs the others, not it
    assert tasks.run_task.run(str(run.pk)) == TaskRun.RUNNING
    # the dead worker beats no more; the redelivered (or re-queued) chunk is claimed again
    go_stale(chunks[1])
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    done = TaskRun.objects.get(pk=run.pk)
    assert (done.state, done.attempts, done.progress) == ("succeeded", 1, 1.0)
    assert TaskChunk.objects.get(pk=chunks[1].pk).attempts == 2
    assert done.result == {
        "objects": 4, "changed": 2, "namespace": None, "chunks": 4,
        "workers": [claims.LOCAL_HOSTNAME],
    }  # fmt: skip
    assert same_aggregates(aggregate_values(), clean)
    # and a clean rebuild now has nothing left to change
    assert rebuild.rebuild_aggregates() == {"objects": 4, "changed": 0}


@pytest.mark.django_db
def test_a_sweep_killed_mid_chunk_and_rerun_equals_one_clean_run(
    client_api, admin_api, monkeypatch
):
    ids = make_objects(client_api, 4)
    for hour in range(1, 6):
        post(client_api, session(f"k-{hour}", [(oid, 10) for oid in ids], hours=hour))
    run = queued(admin_api.row, "ignored_sweep", {"chunk_size": 2})
    with monkeypatch.context() as m:
        die_on_call(m, sweep_mod, "_run_chunk", 2)  # the second chunk dies before committing
        with pytest.raises(WorkerKilled):
            tasks.run_task.run(str(run.pk))
    assert Operation.objects.filter(op_type="IGNORED_CHECK").count() == 2  # the first chunk's
    chunk = TaskChunk.objects.get(run=run, index=1)
    assert chunk.state == "running" and chunk.result is None
    go_stale(chunk)
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    run.refresh_from_db()
    # each chunk's result counts once: the killed attempt's writes rolled back with it
    assert (run.result["examined"], run.result["penalized"], run.result["chunks"]) == (4, 4, 2)
    for oid in ids:  # every object checked and penalized exactly once
        ops = list(Operation.objects.filter(target_id=oid).values_list("op_type", flat=True))
        assert ops.count("IGNORED_CHECK") == 1 and ops.count("PENALTY") == 1
    assert verification.verify_chain_all()["ok"] and verification.verify_replay_all()["ok"]


def test_unknown_kind_in_a_stored_run_fails_it(db, operator_api):
    run = TaskRun.objects.create(kind="retired_kind", params={})
    assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
    assert TaskRun.objects.get(pk=run.pk).error == "Unknown task kind 'retired_kind'."


def test_a_domain_error_fails_the_run_with_its_message(db, admin_api):
    make_namespace("gone")
    run = queued(admin_api.row, "ignored_sweep", {"namespace": "gone"})
    Namespace.objects.filter(name="gone").delete()
    assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
    assert TaskRun.objects.get(pk=run.pk).error == "Namespace 'gone' no longer exists."


def test_domain_errors_from_start_are_domain_errors(db, operator_api):
    with pytest.raises(DomainError) as err:
        runs.task_start(client=operator_api.row, kind="stability_simulation", params={"x": 1})
    assert err.value.status == 400 and err.value.fields == {
        "params.x": ["Unknown parameter for stability_simulation."]
    }
