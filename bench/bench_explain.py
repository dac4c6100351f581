"""Operator insight: ``/objects/{id}/explain`` and ``/retrieval-quality`` on PostgreSQL.

In a fresh ``rms_bench_explain`` database (dropped at the end):

  explain    one object whose chain holds ``--ops`` operations, written by the real services
             (signals posted alone, plus feedback sessions that inject it), then
             ``GET /objects/{id}/explain`` through Django's test client (the full view: auth,
             one indexed read of the chain, the fold, JSON): the first call (cold: new process,
             no cached query plan) and p50/p95 over ``--repeat`` calls. Target p95 ≤ 50 ms.
  retrieval  ``--objects`` objects and ``--sessions`` feedback sessions of ``--per-session``
             ranked injections each, with "used" signals on a third of them, bulk-inserted (the
             rows the ingestion path writes for them; building 1M injections through it would
             take an hour on a shared machine), then ``GET /retrieval-quality`` unwindowed and
             over one day, p50/p95 over ``--repeat`` calls.

    .venv/bin/python bench/bench_explain.py [--ops 1000] [--objects 100000]
        [--sessions 100000] [--per-session 10] [--repeat 20] [--db rms_bench_explain]

``--sessions 0`` measures ``explain`` alone (it reads one chain: the rest of the data set does
not change its plan or its rows); ``--db`` names the scratch database (``rms_bench*``), so two
checkouts on one machine do not drop each other's.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DB = "rms_bench_explain"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
USED = ("REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH")


def timed(call, repeat: int) -> tuple[float, dict, dict]:
    """The cold call's wall ms, then p50/p95 of ``repeat`` calls in wall ms and in this
    process's CPU ms (the latter is what the machine's other load does not inflate)."""
    t0 = time.perf_counter()
    call()
    cold = (time.perf_counter() - t0) * 1000
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return cold, common.percentiles(wall, (50, 95)), common.percentiles(cpu, (50, 95))


def build_chain(http, oid: str, n_ops: int, rng: random.Random) -> int:
    """Signals posted alone and one-object sessions, through the API, until the chain has
    ``n_ops`` operations."""
    from rms.models import Operation

    kinds = ["REFERENCED"] * 4 + ["CONFIRMED", "CORRECTED", "TASK_FAILED_WITH", "UNUSED"]
    ts = EPOCH
    i = 0
    while Operation.objects.filter(target_id=oid).count() < n_ops:
        i += 1
        ts += timedelta(hours=1)
        if i % 3 == 0:
            path = "/api/v1/feedback-sessions"
            body = {
                "session_id": f"conv-{i % 40}",
                "request_id": f"r-{i}",
                "namespace_scope": [common.BENCH_NAMESPACE],
                "context_budget": 4096,
                "tokens_used": 100,
                "ts": ts.isoformat(),
                "injections": [{"object_id": oid, "rank_position": 1, "token_cost": 40}],
            }
        else:
            path = f"/api/v1/objects/{oid}/signals"
            body = {
                "signal_type": rng.choice(kinds),
                "session_id": f"conv-{i % 40}",
                "actor_id": rng.choice(["user-1", "agent-1"]),
                "actor_type": rng.choice(["HUMAN_USER", "AI_AGENT"]),
                "ts": ts.isoformat(),
            }
        resp = http.post(path, body, content_type="application/json")
        assert resp.status_code == 201, resp.content[:500]
    return Operation.objects.filter(target_id=oid).count()


def build_injections(client, ns, args, rng: random.Random) -> int:
    from feedback.models import FeedbackSession, InjectionEvent, SignalRecord
    from rms import services
    from rms.models import MemoryObject

    batch = 1000
    for start in range(0, args.objects, batch):
        items = [
            {"namespace": ns.name, "content": f"fact {k}", "epistemic_type": "ASSERTED"}
            for k in range(start, min(args.objects, start + batch))
        ]
        services.object_create(client=client, items=items)
    ids = list(MemoryObject.objects.filter(namespace=ns).values_list("pk", flat=True))
    injected = 0
    for start in range(0, args.sessions, batch):
        sessions, injections, signals = [], [], []
        for k in range(start, min(args.sessions, start + batch)):
            ts = EPOCH + timedelta(minutes=k)
            sid = uuid.uuid4()
            sessions.append(
                FeedbackSession(
                    id=sid, client=client, request_id=f"q-{k}", body_hash="-",
                    session_id=f"conv-{k}", ts=ts, namespace_scope=[ns.name],
                    context_budget=4096, tokens_used=100, record={}, head_hash="-",
                    last_op_ts=ts,
                )
            )  # fmt: skip
            for rank, oid in enumerate(rng.sample(ids, args.per_session), start=1):
                injections.append(
                    InjectionEvent(
                        session_id=sid, object_id=oid, namespace=ns, ts=ts,
                        rank_position=rank, token_cost=40,
                    )
                )  # fmt: skip
                if rng.random() < 1 / 3:
                    signals.append(
                        SignalRecord(
                            feedback_session_id=sid, object_id=oid, namespace=ns,
                            operation_id=uuid.uuid4(), ts=ts, session_id=f"conv-{k}",
                            signal_type=rng.choice(USED), detection_method="explicit_user",
                            reliability_class="HIGH", base_weight=0.1, effective_weight=0.1,
                            effect="reinforced", actor_id="u", actor_type="HUMAN_USER",
                        )
                    )  # fmt: skip
        FeedbackSession.objects.bulk_create(sessions)
        InjectionEvent.objects.bulk_create(injections)
        SignalRecord.objects.bulk_create(signals)
        injected += len(injections)
    return injected


def run(args) -> None:
    print(f"# load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    common.setup_database(args.db)
    common.django_setup(args.db)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from rms import services
    from rms.api.auth import new_token, token_digest
    from rms.models import ApiClient, Namespace

    rng = random.Random(args.seed)
    ns = Namespace.objects.create(name=common.BENCH_NAMESPACE)

    token = new_token()
    client = ApiClient.objects.create(
        user=get_user_model().objects.create(username="bench"),
        name="bench",
        role="admin",
        token_hash=token_digest(token),
    )
    http = Client(HTTP_AUTHORIZATION=f"Token {token}")
    item = {"namespace": ns.name, "content": "x", "epistemic_type": "ASSERTED", "ts": EPOCH}
    oid = str(services.object_create(client=client, items=[item])[0].pk)
    t0 = time.perf_counter()
    n_ops = build_chain(http, oid, args.ops, rng)
    print(f"# chain of {n_ops} operations written in {time.perf_counter() - t0:.1f} s")
    connection.close()

    def explain():
        resp = http.get(f"/api/v1/objects/{oid}/explain")
        assert resp.status_code == 200, resp.content[:500]

    cold, p, c = timed(explain, args.repeat)
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(explain)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    body = http.get(f"/api/v1/objects/{oid}/explain")
    steps = len(body.json()["salience_effective"]["steps"])
    print(f"# explain answer: {len(body.content) / 1024:.0f} KiB")
    label = f"explain ({n_ops} ops, {steps} effective-salience steps)"
    rows = [[label, cold, p[50], p[95], c[50], c[95]]]
    if not args.sessions:
        print_rows(rows)
        return

    t0 = time.perf_counter()
    n_inj = build_injections(client, ns, args, rng)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"# {args.objects} objects, {n_inj} injections in {time.perf_counter() - t0:.1f} s")
    connection.close()
    day = (EPOCH + timedelta(days=10)).isoformat()
    day_end = (EPOCH + timedelta(days=11)).isoformat()
    for label, query in (
        (f"retrieval-quality, all {n_inj} injections", {}),
        ("retrieval-quality, one day", {"since": day, "until": day_end}),
    ):

        def quality(query=query):
            resp = http.get("/api/v1/retrieval-quality", {"namespace": ns.name, **query})
            assert resp.status_code == 200, resp.content[:500]

        repeat = max(3, args.repeat // 4) if not query else args.repeat
        cold, p, c = timed(quality, repeat)
        rows.append([label, cold, p[50], p[95], c[50], c[95]])
    # Where the unwindowed answer's time goes: reading the rows, and the pure evaluation.
    from feedback import retrieval_quality, selectors

    t0 = time.perf_counter()
    read = selectors.retrieval_rows(ns)
    t1 = time.perf_counter()
    retrieval_quality.evaluate(*read)
    t2 = time.perf_counter()
    nan4 = [math.nan] * 4
    rows.append(["  of which: selector (grouped queries)", (t1 - t0) * 1000, *nan4])
    rows.append(["  of which: pure evaluate", (t2 - t1) * 1000, *nan4])
    print_rows(rows)


def print_rows(rows: list[list]) -> None:
    common.print_table(
        ["operation", "cold ms", "p50 ms", "p95 ms", "CPU p50", "CPU p95"],
        [[r[0], *(f"{v:.1f}" for v in r[1:])] for r in rows],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="cProfile one explain call")
    parser.add_argument("--db", default=DB, help="scratch database (rms_bench*)")
    args = parser.parse_args()
    common.stop_on_sigterm()
    try:
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        common.drop_database(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
