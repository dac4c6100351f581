"""Fan-out of the long passes (``taskruns.chunks``), in this process: planning, the
chunk_size parameter, progress summed over chunks, merged results equal to one whole pass,
failures, retries and the reconciler. Real workers: test_fanout_workers.py."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from django.db import OperationalError

from feedback import rebuild, sweep
from feedback.aggregates import FIELDS
from feedback.models import FeedbackAggregate, FeedbackSession
from rms import store, verification
from rms.errors import DomainError
from rms.models import MemoryObject, Operation
from taskruns import chunks as fanout
from taskruns import claims, enqueue, heartbeat, kinds, tasks
from taskruns.models import TaskChunk, TaskRun
from tests.factories import (
    build_log,
    build_sweep_twin,
    go_stale,
    make_namespace,
    new_object,
    queued,
    same_aggregates,
    start,
    streak,
    sweep_state,
)

pytestmark = pytest.mark.django_db
FANNED = ["ignored_sweep", "rebuild_aggregates", "verify_replay", "verify_chain"]


def without_times(state: dict) -> dict:
    """:func:`sweep_state` without the check times (each run checks at its own now)."""
    return {
        label: {
            **s,
            "object": s["object"][:5],
            "aggregate": tuple(v for v in s["aggregate"] if not isinstance(v, datetime)),
        }
        for label, s in state.items()
    }


def keys_of(chunk: TaskChunk, model=MemoryObject) -> list:
    qs = model.objects.order_by("pk")
    if chunk.lo is not None:
        qs = qs.filter(pk__gte=chunk.lo)
    if chunk.hi is not None:
        qs = qs.filter(pk__lt=chunk.hi)
    return list(qs.values_list("pk", flat=True))


# --- planning ----------------------------------------------------------------------------------


def test_ranges_are_open_at_both_ends():
    assert fanout.ranges([]) == [(None, None)]
    assert fanout.ranges(["b", "d"]) == [(None, "b"), ("b", "d"), ("d", None)]


@pytest.mark.parametrize(
    ("n", "size", "chunks"),
    [(0, 3, 1), (1, 3, 1), (3, 3, 1), (4, 3, 2), (6, 3, 2), (7, 3, 3), (10, 1, 10), (10, 4, 3)],
)
def test_a_plan_has_ceil_n_over_size_chunks_covering_every_key_once(
    admin_api, client_api, n, size, chunks
):
    ids = [new_object(client_api) for _ in range(n)]
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": size})
    planned = TaskChunk.objects.filter(pk__in=fanout.plan(run, send=False)).order_by("index")
    assert planned.count() == chunks
    assert [c.index for c in planned] == list(range(chunks))
    per_chunk = [keys_of(c) for c in planned]
    assert sorted(k for keys in per_chunk for k in keys) == sorted(ids)  # each key exactly once
    assert all(len(keys) == size for keys in per_chunk[:-1])  # full chunks, the rest last
    assert 0 < len(per_chunk[-1]) <= size if n else per_chunk == [[]]


def test_the_boundaries_come_from_one_query(admin_api, client_api, django_assert_num_queries):
    for _ in range(5):
        new_object(client_api)
    with django_assert_num_queries(1):
        bounds = store.get().key_boundaries(MemoryObject.objects.all(), "pk", 2)
    ordered = [str(k) for k in MemoryObject.objects.order_by("pk").values_list("pk", flat=True)]
    assert [str(uuid.UUID(b)) for b in bounds] == [ordered[2], ordered[4]]


def test_verify_chain_chunks_every_target_table_in_order(operator_api, client_api):
    build_log(client_api, objects=5, sessions=3)  # + the namespace; no relationships
    run = queued(operator_api.row, "verify_chain", {"chunk_size": 2})
    fanout.plan(run, send=False)
    tables = list(
        TaskChunk.objects.filter(run=run).order_by("index").values_list("table", flat=True)
    )
    assert (
        tables == ["memory_object"] * 3 + ["relationship", "namespace"] + ["feedback_session"] * 2
    )


def test_the_sweep_is_planned_over_its_candidates_only(admin_api, client_api):
    candidates = [new_object(client_api) for _ in range(5)]
    streak(client_api, candidates, 5)
    for _ in range(4):
        new_object(client_api)  # not candidates
    run = queued(admin_api.row, "ignored_sweep", {"chunk_size": 2})
    assert len(fanout.plan(run, send=False)) == 3


# --- the chunk_size parameter -------------------------------------------------------------------


@pytest.mark.parametrize("kind", FANNED)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "between 1 and 100000"),
        (-5, "between 1 and 100000"),
        (100_001, "between 1 and 100000"),
        (2.5, "Must be an integer"),
        ("100", "Must be an integer"),
        (True, "Must be an integer"),
        (None, "Must be an integer"),
    ],
)
def test_a_bad_chunk_size_is_400(admin_api, kind, value, message):
    resp = start(admin_api, kind, {"chunk_size": value})
    assert resp.status_code == 400, resp.content
    assert message in resp.json()["error"]["fields"]["params.chunk_size"][0]
    assert not TaskRun.objects.exists()


@pytest.mark.parametrize("kind", FANNED)
def test_chunk_size_defaults_to_1000_and_is_stored(admin_api, kind):
    assert start(admin_api, kind).json()["params"]["chunk_size"] == 1000
    assert start(admin_api, kind, {"chunk_size": 7.0}).json()["params"]["chunk_size"] == 7


def test_other_kinds_take_no_chunk_size(operator_api):
    resp = start(operator_api, "benchmark_suite", {"chunk_size": 10})
    assert resp.status_code == 400
    assert "params.chunk_size" in resp.json()["error"]["fields"]


# --- progress ----------------------------------------------------------------------------------


def test_run_progress_is_the_mean_of_its_chunks_and_never_goes_back(admin_api, client_api):
    for _ in range(4):
        new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 1})
    fanout.plan(run, send=False)
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    for index, value in enumerate([1.0, 0.5, 0.5, 0.0]):
        TaskChunk.objects.filter(run=run, index=index).update(progress=value)
    heartbeat.run_progress_update(run.pk)
    assert TaskRun.objects.get(pk=run.pk).progress == 0.5  # (1 + 0.5 + 0.5 + 0) / 4
    TaskChunk.objects.filter(run=run, index=1).update(progress=0.0)  # claimed again: from 0
    heartbeat.run_progress_update(run.pk)
    assert TaskRun.objects.get(pk=run.pk).progress == 0.5


def test_progress_moves_a_chunk_at_a_time(admin_api, client_api, monkeypatch):
    ids = [new_object(client_api) for _ in range(6)]
    streak(client_api, ids, 5)
    run = queued(admin_api.row, "ignored_sweep", {"chunk_size": 2})
    seen = []
    real = heartbeat.run_progress_update

    def recording(run_id):
        real(run_id)
        seen.append(TaskRun.objects.get(pk=run_id).progress)

    monkeypatch.setattr(heartbeat, "run_progress_update", recording)
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    # each chunk's writer reports 1.0, then the chunk's completion: 3 chunks
    assert seen == [pytest.approx(1 / 3)] * 2 + [pytest.approx(2 / 3)] * 2 + [1.0]
    assert TaskRun.objects.get(pk=run.pk).progress == 1.0


def test_a_chunk_s_heartbeat_leaves_its_end_to_the_chunk_s_own_transaction(monkeypatch):
    """Progress below 1.0 is written at once; 1.0 is written by the chunk's completion, so a
    short chunk's heartbeat thread never opens a connection (its stopping beat has nothing
    left to write)."""
    calls = []
    monkeypatch.setattr(heartbeat, "run_progress_update", calls.append)
    beat = heartbeat.ChunkHeartbeat(0, "run", every=60)  # its thread is not started
    beat.offer(0.5)
    assert beat._wake.is_set()
    beat._wake.clear()
    beat.beat()
    assert calls == ["run"]
    beat.offer(1.0)
    assert not beat._wake.is_set()
    beat._stop.set()
    beat.beat()
    assert calls == ["run"]


# --- merged results equal one whole pass ----------------------------------------------------


def test_a_chunked_sweep_ends_as_one_whole_sweep(admin_api):
    make_namespace("twin-a")
    make_namespace("twin-b")
    a = build_sweep_twin(admin_api, admin_api.row, "twin-a")
    b = build_sweep_twin(admin_api, admin_api.row, "twin-b")
    whole = sweep.sweep(namespace="twin-b")
    run = queued(admin_api.row, "ignored_sweep", {"namespace": "twin-a", "chunk_size": 1})
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    run.refresh_from_db()
    assert run.result["chunks"] == len(a)  # every object of the twin is a candidate
    assert run.result["workers"] == [claims.LOCAL_HOSTNAME]
    counts = {k: v for k, v in run.result.items() if k not in ("chunks", "workers")}
    assert counts == {**whole, "namespaces": ["twin-a"]}
    assert without_times(sweep_state(a)) == without_times(sweep_state(b))


def test_the_chunks_of_one_sweep_run_read_each_streak_session_once(admin_api, monkeypatch):
    """A worker keeps the session contexts of the run whose chunks it runs (as a sweep in one
    process keeps them over its chunks); another run reads them again."""
    make_namespace("twin-a")
    a = build_sweep_twin(admin_api, admin_api.row, "twin-a")
    read: list = []
    load = sweep.SessionContexts.load

    def counting(self, session_ids):
        read.extend(s for s in session_ids if s not in self._sessions)
        return load(self, session_ids)

    monkeypatch.setattr(sweep.SessionContexts, "load", counting)
    run = queued(admin_api.row, "ignored_sweep", {"namespace": "twin-a", "chunk_size": 1})
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    assert TaskRun.objects.get(pk=run.pk).result["chunks"] == len(a) > 1
    assert read and len(read) == len(set(read))  # streak sessions shared by objects: read once
    mine = kinds._run_contexts.of(run.pk)
    assert set(mine._sessions) == set(read)
    other = kinds._run_contexts.of(uuid.uuid4())
    assert other is not mine and other._sessions == {}  # another run starts afresh


def test_a_chunked_rebuild_equals_the_whole_log_fold(admin_api, client_api):
    ids = build_log(client_api, objects=6, sessions=4)
    clean = {row.object_id: row for row in FeedbackAggregate.objects.all()}
    folded = rebuild.fold_log()
    FeedbackAggregate.objects.filter(object_id__in=ids[::2]).update(uses=5, total_unused=3)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 4})
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    run.refresh_from_db()
    assert (run.result["objects"], run.result["changed"], run.result["chunks"]) == (6, 3, 2)
    rows = {row.object_id: row for row in FeedbackAggregate.objects.all()}
    assert same_aggregates(rows, clean)
    assert folded == rebuild.fold_log()  # the whole-log fold agrees with the chunks' writes
    assert all(getattr(rows[k], f) == getattr(agg, f) for k, agg in folded.items() for f in FIELDS)


@pytest.mark.parametrize("kind", ["verify_replay", "verify_chain"])
def test_a_chunked_verification_equals_one_whole_pass(operator_api, client_api, kind):
    ids = build_log(client_api, objects=5, sessions=3)
    for oid in ids[1::2]:  # two broken chains, in different chunks
        op = Operation.objects.filter(target_id=oid, state__isnull=False).order_by("seq").last()
        Operation.objects.filter(seq=op.seq).update(state={**op.state, "confidence": 0.01})
    if kind == "verify_replay":
        whole = verification.verify_replay_all()
    else:
        heads = FeedbackSession.objects.order_by("pk").values_list("pk", "head_hash")
        whole = verification.verify_chain_all(extra_heads=heads, extra_total=heads.count())
    run = queued(operator_api.row, kind, {"chunk_size": 1})
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    run.refresh_from_db()
    assert whole["ok"] is False and whole["mismatch_count"] == 2
    assert {k: v for k, v in run.result.items() if k not in ("chunks", "workers")} == whole


def test_mismatches_are_capped_over_chunks(operator_api, client_api, monkeypatch):
    monkeypatch.setattr(verification, "MAX_LISTED", 2)
    ids = build_log(client_api, objects=3, sessions=1)
    for oid in ids:
        op = Operation.objects.filter(target_id=oid).order_by("seq").first()
        Operation.objects.filter(seq=op.seq).update(payload={**op.payload, "x": 1})
    run = queued(operator_api.row, "verify_chain", {"chunk_size": 1})
    tasks.run_task.run(str(run.pk))
    run.refresh_from_db()
    assert (run.result["mismatch_count"], len(run.result["mismatches"])) == (3, 2)
    assert run.result["truncated"] is True and run.result["ok"] is False


# --- failures, retries, claims, the reconciler ----------------------------------------------


def test_a_failing_chunk_fails_the_run_with_the_chunk_named(admin_api, client_api, monkeypatch):
    for _ in range(3):
        new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 1})
    real = rebuild.rebuild_range
    calls = []

    def broken(*args):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("fold exploded")
        return real(*args)

    monkeypatch.setattr(rebuild, "rebuild_range", broken)
    assert tasks.run_task.run(str(run.pk)) == TaskRun.FAILED
    run.refresh_from_db()
    assert run.error.startswith("Chunk 2 of 3 (memory_object [")
    assert run.error.endswith("): ValueError: fold exploded")
    states = list(
        TaskChunk.objects.filter(run=run).order_by("index").values_list("state", flat=True)
    )
    assert states == ["succeeded", "failed", "failed"]  # the waiting chunk is not run


def test_a_chunk_of_a_deleted_namespace_fails_with_its_message(admin_api):
    make_namespace("gone")
    run = queued(admin_api.row, "ignored_sweep", {"namespace": "gone"})
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    (chunk_id,) = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)
    from rms.models import Namespace

    Namespace.objects.filter(name="gone").delete()
    assert tasks.run_chunk.run(chunk_id) == TaskRun.FAILED
    assert TaskRun.objects.get(pk=run.pk).error.endswith(": Namespace 'gone' no longer exists.")
    with pytest.raises(DomainError):
        kinds.namespace_of({"namespace": "gone"})


def test_a_transient_error_retries_the_chunk_alone(admin_api, client_api, monkeypatch):
    for _ in range(2):
        new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 1})
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    first, second = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)
    real = rebuild.rebuild_range
    calls = []

    def flaky(*args):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real(*args)

    monkeypatch.setattr(rebuild, "rebuild_range", flaky)
    tasks.run_chunk.apply(args=[first])  # in process, with a real retry request
    assert TaskChunk.objects.get(pk=first).attempts == 2
    assert TaskChunk.objects.get(pk=first).state == "succeeded"
    assert TaskRun.objects.get(pk=run.pk).state == "running"  # the other chunk is still to run
    tasks.run_chunk.apply(args=[second])
    done = TaskRun.objects.get(pk=run.pk)
    assert done.state == "succeeded" and done.result["chunks"] == 2


def test_retries_stop_after_three_and_fail_chunk_and_run(admin_api, client_api, monkeypatch):
    new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    (chunk_id,) = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)

    def down(*args):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(rebuild, "rebuild_range", down)
    tasks.run_chunk.apply(args=[chunk_id])
    chunk = TaskChunk.objects.get(pk=chunk_id)
    assert (chunk.state, chunk.attempts) == ("failed", 4)
    assert "Database error after 3 retries" in TaskRun.objects.get(pk=run.pk).error


def test_a_chunk_that_keeps_killing_its_worker_is_given_up(admin_api, client_api):
    run = queued(admin_api.row, "verify_replay")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    chunk_id, _ = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)  # objects, relations
    TaskChunk.objects.filter(pk=chunk_id).update(state="running", attempts=tasks.MAX_ATTEMPTS)
    go_stale(TaskChunk.objects.get(pk=chunk_id))
    assert tasks.run_chunk.run(chunk_id) == TaskRun.FAILED
    assert "Gave up after" in TaskRun.objects.get(pk=run.pk).error


def test_a_chunk_claimed_again_meanwhile_rolls_its_work_back(admin_api, client_api, monkeypatch):
    ids = [new_object(client_api) for _ in range(2)]
    streak(client_api, ids, 5)
    run = queued(admin_api.row, "ignored_sweep")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    (chunk_id,) = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)
    chunk = claims.chunk_claim(chunk_id)
    # another worker takes it over (its heartbeat looked stale) while this one runs it
    TaskChunk.objects.filter(pk=chunk_id).update(attempts=chunk.attempts + 1)
    assert fanout.execute(chunk, "old@host", lambda f: None) == "superseded"
    assert not Operation.objects.filter(op_type="IGNORED_CHECK").exists()
    assert TaskChunk.objects.get(pk=chunk_id).state == "running"


def test_a_redelivered_run_message_does_not_plan_again(admin_api, client_api):
    new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates")
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED
    assert tasks.run_task.run(str(run.pk)) == TaskRun.SUCCEEDED  # nothing pending: just its state
    assert TaskChunk.objects.filter(run=run).count() == 1


def test_the_reconciler_requeues_and_resends_lost_chunks(admin_api, client_api, monkeypatch):
    for _ in range(3):
        new_object(client_api)
    run = queued(admin_api.row, "rebuild_aggregates", {"chunk_size": 1})
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    ids = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)
    TaskChunk.objects.filter(pk=ids[0]).update(state="succeeded")
    TaskChunk.objects.filter(pk=ids[1]).update(state="running", attempts=1)
    go_stale(TaskChunk.objects.get(pk=ids[1]))  # its worker died
    go_stale(TaskRun.objects.get(pk=run.pk))  # and no chunk beat for the run either
    TaskChunk.objects.filter(pk__in=ids).update(created_at=run.created_at.replace(year=2020))
    sent = []
    monkeypatch.setattr(enqueue, "run_chunk", lambda chunk_id, queue=None: sent.append(chunk_id))
    counts = tasks.reconcile_task_runs.run()
    assert counts["requeued"] == 0  # the run has chunks: not re-planned
    assert (counts["chunks_requeued"], counts["chunks_sent"]) == (1, 2)
    assert sorted(sent) == sorted(ids[1:])
    assert TaskChunk.objects.get(pk=ids[1]).state == "queued"
    assert TaskRun.objects.get(pk=run.pk).state == "running"


def test_a_broker_error_on_send_leaves_the_chunks_unsent(admin_api, client_api, monkeypatch):
    new_object(client_api)
    run = queued(admin_api.row, "verify_replay")
    TaskRun.objects.filter(pk=run.pk).update(state=TaskRun.RUNNING)
    ids = fanout.plan(TaskRun.objects.get(pk=run.pk), send=False)

    def down(chunk_id, queue=None):
        raise ConnectionError("broker away")

    monkeypatch.setattr(enqueue, "run_chunk", down)
    assert fanout.send_chunks(ids) == 0
    assert TaskChunk.objects.get(pk=ids[0]).sent_at is None


def test_the_long_passes_fan_out_and_every_kind_runs_one_way():
    fanned = {name for name, kind in kinds.KINDS.items() if kind.fanned_out}
    assert fanned == {
        kinds.IGNORED_SWEEP, kinds.REBUILD_AGGREGATES, kinds.VERIFY_REPLAY,
        kinds.VERIFY_CHAIN,
    }  # fmt: skip
    assert all((kind.run is None) == kind.fanned_out for kind in kinds.KINDS.values())


def test_beat_s_sweep_is_sent_to_fan_out_like_an_api_start(monkeypatch):
    sent = []
    monkeypatch.setattr(enqueue, "run_task", lambda run_id: sent.append(str(run_id)))
    run_id = tasks.sweep_all.apply().get()  # as a worker runs it: not called directly
    run = TaskRun.objects.get(pk=run_id)
    assert sent == [run_id]
    assert (run.state, run.created_by, run.params) == ("queued", "beat", {"chunk_size": 1000})
    assert run.sent_at is not None
