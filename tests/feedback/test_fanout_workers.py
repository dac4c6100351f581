"""Fan-out over real worker processes: two ``celery worker --pool solo`` processes
with distinct node names on PostgreSQL and Redis. A sweep, a rebuild and a verification run
chunks on both and end as one whole pass in this process does on the same data; a worker killed
mid-chunk costs the pass nothing but time; two sweeps at once decide each object once.

The same data twice: the scenario is built in two namespaces, one run through the workers, the
other in this process, and compared object by object (by content) without the check times.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from datetime import datetime

import pytest
from django.db import connection, transaction

from feedback import aggregates, rebuild, sweep
from feedback.models import FeedbackAggregate, FeedbackSession
from rms import verification
from rms.models import MemoryObject, Operation
from taskruns import enqueue, tasks
from taskruns.models import TaskChunk, TaskRun
from tests.factories import CRASH_CASES, build_sweep_twin, make_namespace, new_object, streak
from tests.feedback.conftest import two_workers, wait_for_task

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]
#: Candidates per namespace beside the twin's seven.
EXTRA = 21


@pytest.fixture(autouse=True)
def _no_after_session_sweep(monkeypatch):
    # The workers would otherwise sweep each object right after its sessions.
    monkeypatch.setattr(enqueue, "sweep_objects", lambda ids: None)


def scenario(admin_api, ns: str) -> dict:
    """The sweep twin plus EXTRA plain candidates in ``ns``: {content: object id}."""
    make_namespace(ns)
    ids = build_sweep_twin(admin_api, admin_api.row, ns)
    extra = [new_object(admin_api, content=f"extra fact {k}", ns=ns) for k in range(EXTRA)]
    streak(admin_api, extra, 5, ns=ns)
    return {**ids, **{f"extra {k}": oid for k, oid in enumerate(extra)}}


def state(ids: dict) -> dict:
    """Everything a sweep or rebuild may change, by label, without times (each run checks at
    its own now)."""
    out = {}
    for label, oid in ids.items():
        obj = MemoryObject.objects.get(pk=oid)
        agg = FeedbackAggregate.objects.get(object_id=oid)
        ops = Operation.objects.filter(target_id=oid).order_by("seq")
        out[label] = {
            "object": (obj.confidence, obj.salience_base, obj.version, obj.pinned),
            "aggregate": tuple(
                v
                for v in (getattr(agg, f) for f in aggregates.FIELDS)
                if not isinstance(v, datetime)
            ),  # fmt: skip
            "chain": [op.op_type for op in ops],
            "checks": [
                {k: v for k, v in op.payload.items() if k != "streak_feedback_session_ids"}
                for op in ops
                if op.op_type == "IGNORED_CHECK"
            ],
        }
    return out


def op_counts(namespace: str) -> Counter:
    return Counter(Operation.objects.filter(namespace=namespace).values_list("op_type", flat=True))


def start(api, kind, params) -> str:
    resp = api.post("/api/v1/tasks", {"kind": kind, "params": params}, format="json")
    assert resp.status_code == 202, resp.content
    return resp.json()["id"]


def assert_both_worked(result: dict, workers, chunks: int) -> None:
    assert result["chunks"] == chunks
    assert result["workers"] == sorted(w.node for w in workers)
    hosts = Counter(TaskChunk.objects.values_list("hostname", flat=True))
    assert set(hosts) == {w.node for w in workers}, hosts


def test_a_sweep_on_two_workers_ends_as_one_whole_sweep(celery_workers, admin_api):
    a, b = scenario(admin_api, "fan-a"), scenario(admin_api, "fan-b")
    whole = sweep.sweep(namespace="fan-b")
    run_id = start(admin_api, "ignored_sweep", {"namespace": "fan-a", "chunk_size": 2})
    body = wait_for_task(admin_api, celery_workers[0], run_id, timeout=120)
    assert body["state"] == "succeeded", body["error"]
    result = body["result"]
    assert_both_worked(result, celery_workers, chunks=(len(a) + 1) // 2)
    assert {k: v for k, v in result.items() if k not in ("chunks", "workers")} == {
        **whole,
        "namespaces": ["fan-a"],
    }
    assert whole["examined"] == len(CRASH_CASES) + EXTRA
    assert state(a) == state(b)
    assert op_counts("fan-a") == op_counts("fan-b")


def test_a_rebuild_on_two_workers_ends_as_one_whole_rebuild(celery_workers, admin_api):
    a, b = scenario(admin_api, "fan-a"), scenario(admin_api, "fan-b")
    sweep.sweep()  # penalties and checks in the log too
    clean = state(a)
    for ids in (a, b):
        damaged = list(ids.values())[::3]
        FeedbackAggregate.objects.filter(object_id__in=damaged).update(uses=7, unused_streak=0)
    whole = rebuild.rebuild_aggregates(make_namespace("fan-b"))
    run_id = start(admin_api, "rebuild_aggregates", {"namespace": "fan-a", "chunk_size": 2})
    body = wait_for_task(admin_api, celery_workers[0], run_id, timeout=120)
    assert body["state"] == "succeeded", body["error"]
    result = body["result"]
    assert_both_worked(result, celery_workers, chunks=(len(a) + 1) // 2)
    assert whole == {"objects": len(a), "changed": len(range(0, len(a), 3))}
    assert {k: result[k] for k in ("objects", "changed")} == whole
    assert state(a) == clean == state(b)


@pytest.mark.parametrize("kind", ["verify_chain", "verify_replay"])
def test_a_verification_on_two_workers_equals_one_whole_pass(celery_workers, admin_api, kind):
    a = scenario(admin_api, "fan-a")
    sweep.sweep()
    broken = Operation.objects.filter(target_id=a["extra 3"], state__isnull=False).last()
    Operation.objects.filter(seq=broken.seq).update(state={**broken.state, "confidence": 0.5})
    if kind == "verify_chain":
        heads = FeedbackSession.objects.order_by("pk").values_list("pk", "head_hash")
        whole = verification.verify_chain_all(extra_heads=heads, extra_total=heads.count())
    else:
        whole = verification.verify_replay_all()
    assert whole["mismatch_count"] == 1
    run_id = start(admin_api, kind, {"chunk_size": 3})
    body = wait_for_task(admin_api, celery_workers[0], run_id, timeout=120)
    assert body["state"] == "succeeded", body["error"]
    result = body["result"]
    assert {k: v for k, v in result.items() if k not in ("chunks", "workers")} == whole
    assert result["chunks"] >= 10
    assert_both_worked(result, celery_workers, chunks=result["chunks"])


def test_two_sweeps_at_once_decide_each_object_once(celery_workers, admin_api):
    a = scenario(admin_api, "fan-a")
    first = start(admin_api, "ignored_sweep", {"chunk_size": 1})
    second = start(admin_api, "ignored_sweep", {"chunk_size": 1})
    worker = celery_workers[0]
    results = [wait_for_task(admin_api, worker, run_id, timeout=120) for run_id in (first, second)]
    assert [r["state"] for r in results] == ["succeeded", "succeeded"], results
    for oid in a.values():
        assert Operation.objects.filter(target_id=oid, op_type="IGNORED_CHECK").count() == 1
    # each decision counted by the sweep that made it, once
    assert sum(r["result"]["examined"] for r in results) == len(a)
    assert verification.verify_chain_all()["ok"]


def hold_locks(ids: list, held: threading.Event, release: threading.Event) -> None:
    """On a connection of its own: lock these objects until ``release``."""
    try:
        with transaction.atomic():
            list(MemoryObject.objects.filter(pk__in=ids).select_for_update())
            held.set()
            release.wait(120)
    finally:
        connection.close()


def test_a_worker_killed_mid_chunk_costs_the_pass_nothing(admin_api, tmp_path, settings):
    timeout = 3  # seconds without a heartbeat before a chunk counts as lost
    settings.RMS_TASK_HEARTBEAT_TIMEOUT = timeout
    a, b = scenario(admin_api, "fan-a"), scenario(admin_api, "fan-b")
    whole = sweep.sweep(namespace="fan-b")
    first_chunk = sorted(a.values(), key=str)[:2]  # chunk 0 of chunks of two, in key order
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_locks, args=(first_chunk, held, release))
    holder.start()
    env = {"RMS_TASK_HEARTBEAT_EVERY": "1", "RMS_TASK_HEARTBEAT_TIMEOUT": str(timeout)}
    try:
        assert held.wait(30)
        with two_workers(tmp_path, **env) as workers:
            run_id = start(admin_api, "ignored_sweep", {"namespace": "fan-a", "chunk_size": 2})
            deadline = time.monotonic() + 60
            while not (chunk := TaskChunk.objects.filter(index=0, state="running").first()):
                assert time.monotonic() < deadline, [w.log_tail() for w in workers]
                time.sleep(0.05)
            (victim,) = [w for w in workers if w.node == chunk.hostname]
            (survivor,) = [w for w in workers if w is not victim]
            time.sleep(0.5)  # it is waiting on the objects' locks, mid-chunk
            os.killpg(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait(10)
            release.set()
            deadline = time.monotonic() + 90
            while (run := TaskRun.objects.get(pk=run_id)).state == "running":
                tasks.reconcile_task_runs.run()  # beat's job: re-queue and re-send lost chunks
                survivor.check_alive()
                assert time.monotonic() < deadline, survivor.log_tail()
                time.sleep(0.5)
    finally:
        release.set()
        holder.join(30)
    assert run.state == "succeeded", run.error
    lost = TaskChunk.objects.get(run_id=run_id, index=0)
    assert (lost.attempts, lost.hostname, lost.state) == (2, survivor.node, "succeeded")
    assert survivor.node in run.result["workers"]
    assert {k: v for k, v in run.result.items() if k not in ("chunks", "workers")} == {
        **whole,
        "namespaces": ["fan-a"],
    }
    assert state(a) == state(b)
    assert op_counts("fan-a") == op_counts("fan-b")
