"""rms-client: the caller's cost of recording one interaction, and the recorder's end-to-end
throughput against posting the same sessions straight to the batch endpoint.

    .venv/bin/python bench/bench_client.py [--calls 20000] [--sessions 4000] [--objects 200]

1. Caller cost: one interaction with 10 injections and 3 signals, built and queued (target
   ≤ 50 µs median). Measured twice: with the sender idle (pure build + enqueue) and while the
   sender is posting to the server in the background (the realistic case: they share the GIL).
2. Throughput: ``--sessions`` sessions (10 injections, 3 signals each) through the recorder
   (flush_at 500) from the first enqueue to the last acknowledgement, beside the same sessions
   (new request ids) posted with ``record_sessions`` in chunks of 500 on the same server in the
   same run (target ≥ 80 %).

A throwaway PostgreSQL database (rms_bench_client) and a gunicorn server on a free port.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from rms_client import RMSClient  # noqa: E402

DB = "rms_bench_client"
SIGNALS = ("CONFIRMED", "REFERENCED", "CORRECTED")


def build(rec, ids, rng, n):
    """One interaction of the benchmark's shape."""
    chosen = rng.sample(ids, 10)
    with rec.interaction("bench", context_budget=4096, session_id=f"s-{n}",
                         context_text="what stack does Alice use") as it:  # fmt: skip
        for rank, oid in enumerate(chosen, start=1):
            it.injected(oid, rank=rank, token_cost=48, composite_score=0.73)
        for oid, st in zip(chosen[:3], SIGNALS, strict=True):
            it.signal(oid, st, actor_id="u-9", actor_type="HUMAN_USER")
        it.outcome("SUCCESS")


def caller_cost(client, ids, calls: int, sending: bool) -> list[float]:
    rng = random.Random(1)
    flush_at, interval = (500, 0.05) if sending else (100_000, 3600.0)
    rec = client.recorder(flush_at=flush_at, flush_interval=interval, max_queue=calls + 1)
    samples = []
    clock = time.perf_counter_ns
    for n in range(calls):
        t0 = clock()
        build(rec, ids, rng, n)
        samples.append((clock() - t0) / 1000.0)
    rec.close(timeout=600)
    return samples


def session_body(ids, rng, n):
    chosen = rng.sample(ids, 10)
    return {
        "session_id": f"d-{n}", "request_id": str(uuid.uuid4()), "namespace_scope": ["bench"],
        "context_budget": 4096, "tokens_used": 480, "context_text": "what stack does Alice use",
        "outcome": "SUCCESS",
        "injections": [{"object_id": oid, "rank_position": r, "token_cost": 48,
                        "composite_score": 0.73} for r, oid in enumerate(chosen, start=1)],
        "signals": [{"object_id": oid, "signal_type": st, "actor_id": "u-9",
                     "actor_type": "HUMAN_USER"}
                    for oid, st in zip(chosen[:3], SIGNALS, strict=True)],
    }  # fmt: skip


def throughput(client, ids, sessions: int) -> tuple[float, float, dict]:
    rng = random.Random(2)
    bodies = [session_body(ids, rng, n) for n in range(sessions)]
    t0 = time.perf_counter()
    items = client.record_sessions(bodies)
    direct = sessions / (time.perf_counter() - t0)
    assert all(i["status"] == 201 for i in items), "direct posts must all be stored"
    rec = client.recorder(flush_at=500, flush_interval=0.2, max_queue=sessions + 1)
    t0 = time.perf_counter()
    for n in range(sessions):
        build(rec, ids, rng, sessions + n)
    assert rec.flush(timeout=1200)
    recorded = sessions / (time.perf_counter() - t0)
    stats = rec.stats
    rec.close()
    return direct, recorded, stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=4000)
    parser.add_argument("--objects", type=int, default=200)
    args = parser.parse_args(argv)
    common.stop_on_sigterm()
    print(f"# machine busy before the run: {common.machine_busy(1.0):.0f} % of all CPUs")
    common.setup_database(DB)
    try:
        token = common.create_api_client("bench-client", namespaces=["bench"], db=DB)
        with common.Server(db=DB) as server:
            client = RMSClient(server.base, token, timeout=120, max_retries=5)
            ids = [o["id"] for o in client.create_objects(
                [{"namespace": "bench", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
                 for i in range(args.objects)])]  # fmt: skip
            rows = []
            for sending in (False, True):
                samples = caller_cost(client, ids, args.calls, sending)
                q = common.percentiles(samples)
                case = "sender busy" if sending else "sender idle"
                median = statistics.median(samples)
                rows.append([case, f"{len(samples):,}", f"{median:.1f}", f"{q[95]:.1f}",
                             f"{q[99]:.1f}"])  # fmt: skip
            print("\n## caller's cost of one interaction (10 injections, 3 signals), µs")
            common.print_table(["case", "calls", "median", "p95", "p99"], rows)
            direct, recorded, stats = throughput(client, ids, args.sessions)
            print(f"\n## throughput, {args.sessions:,} sessions each (10 injections, 3 signals)")
            common.print_table(
                ["path", "sessions/s"],
                [["record_sessions (direct, chunks of 500)", common.fmt_rate(direct)],
                 ["recorder (flush_at 500)", common.fmt_rate(recorded)]],
            )  # fmt: skip
            print(f"recorder / direct: {100 * recorded / direct:.0f} %   recorder stats: {stats}")
            client.close()
    finally:
        common.drop_database(DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
