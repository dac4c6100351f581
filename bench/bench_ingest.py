"""Feedback-session ingestion through HTTP on PostgreSQL, beside a raw COPY of the same rows.

Sessions carry 10 injections and 3 signals (13 events). Measured, in one run on one database:

1. the single endpoint (POST /feedback-sessions): latency p50/p95/p99 from one client, and
   throughput from 4 concurrent clients;
2. the batch endpoint (POST /feedback-sessions/batch, 500 sessions a request);
3. the floor: the rows the batch run wrote (operations, injections, signal records, sessions,
   scopes), read back and inserted again with COPY into same-shaped tables with the same
   indexes, in one transaction; three times, the fastest counts. Batch throughput is reported
   as a share of that floor.

    .venv/bin/python bench/bench_ingest.py [--objects 5000] [--single 400] [--batches 6] [--db NAME]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_ingest"
INJECTIONS, SIGNALS = 10, 3
EVENTS = INJECTIONS + SIGNALS
TABLES = (
    "rms_operation",
    "feedback_injectionevent",
    "feedback_signalrecord",
    "feedback_feedbacksession",
    "feedback_sessionnamespace",
)


def session_body(rng: random.Random, ids: list[str], tag: str) -> dict:
    injected = rng.sample(ids, INJECTIONS)
    return {
        "session_id": f"conv-{rng.randint(0, 10_000)}",
        "request_id": f"{tag}-{uuid.uuid4()}",
        "namespace_scope": [common.BENCH_NAMESPACE],
        "context_budget": 4096,
        "tokens_used": 2000,
        "context_text": "what stack does the customer use",
        "context_tags": ["stack"],
        "outcome": rng.choice(["SUCCESS", "PARTIAL", "FAILED"]),
        "injections": [
            {
                "object_id": oid,
                "rank_position": i + 1,
                "representation_type": "STRUCTURED",
                "token_cost": rng.randint(20, 120),
                "composite_score": round(rng.random(), 3),
            }
            for i, oid in enumerate(injected)
        ],
        "signals": [
            {
                "object_id": oid,
                "signal_type": rng.choice(["REFERENCED", "CONFIRMED", "CORRECTED"]),
                "actor_id": "analyser",
                "actor_type": "SYSTEM_PROCESS",
            }
            for oid in injected[:SIGNALS]
        ],
    }


def create_objects(api: common.Api, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        body = [
            {
                "namespace": common.BENCH_NAMESPACE,
                "content": f"fact {i}",
                "epistemic_type": "ASSERTED",
            }
            for i in range(start, min(n, start + 1000))
        ]
        status, out = api.request("POST", "/api/v1/objects", body)
        assert status == 201, (status, out)
        ids += [o["id"] for o in out]
    return ids


def run_single(port: int, token: str, ids: list[str], n: int, threads: int) -> dict:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()

    def worker(k: int) -> None:
        nonlocal errors
        rng = random.Random(k)
        api = common.Api(port, token)
        for _ in range(n // threads):
            body = session_body(rng, ids, f"s{k}")
            t0 = time.perf_counter()
            status, _ = api.request("POST", "/api/v1/feedback-sessions", body, parse=False)
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                errors += status != 201
        api.close()

    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    pct = common.percentiles([x * 1000 for x in latencies])
    return {"sessions": len(latencies), "wall": wall, "errors": errors, "p": pct}


def run_batches(port: int, token: str, ids: list[str], batches: int, size: int = 500) -> dict:
    rng = random.Random(99)
    # Encoded before the clock starts and parsed after it stops: the load generator shares the
    # two cores with the server, and its own JSON work (15 ms to encode a 1.1 MB batch, more to
    # parse the answer) is not the service's.
    bodies = [
        json.dumps([session_body(rng, ids, f"b{b}") for _ in range(size)]).encode()
        for b in range(batches)
    ]
    api = common.Api(port, token, timeout=300)
    times, errors = [], 0
    for body in bodies:
        t0 = time.perf_counter()
        status, raw = api.request("POST", "/api/v1/feedback-sessions/batch", body, parse=False)
        times.append(time.perf_counter() - t0)
        out = json.loads(raw)
        errors += status != 207 or any(r["status"] != 201 for r in out["results"])
    api.close()
    return {"sessions": batches * size, "wall": sum(times), "errors": errors, "per_batch": times}


def raw_copy_floor(sessions_since: str, repeat: int = 3) -> tuple[list[float], int]:
    """COPY the rows the batch run wrote into same-shaped tables with the same indexes,
    ``repeat`` times into emptied tables; returns each run's seconds and the row count.

    One COPY of ~100k rows lasts 1–2 s and a checkpoint or autovacuum landing in it moves it by
    half: the floor is the fastest run (the limit), and the spread is printed."""
    import psycopg

    with psycopg.connect(host=common.HOST, port=common.PG_PORT, user="postgres", dbname=DB) as c:
        data = {}
        ids = [
            r[0]
            for r in c.execute(
                "SELECT id FROM feedback_feedbacksession WHERE request_id LIKE 'b%%' AND ts >= %s",
                (sessions_since,),
            ).fetchall()
        ]
        where = {
            "feedback_feedbacksession": ("id = ANY(%s)", ids),
            "feedback_sessionnamespace": ("session_id = ANY(%s)", ids),
            "feedback_injectionevent": ("session_id = ANY(%s)", ids),
            "feedback_signalrecord": ("feedback_session_id = ANY(%s)", ids),
            "rms_operation": ("ts >= %s AND op_type <> 'OBJECT_CREATED'", sessions_since),
        }
        for table in TABLES:
            cond, arg = where[table]
            cols = [
                r[0]
                for r in c.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name=%s "
                    "AND column_default IS NULL ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            ]
            # As text, like the application's COPY sends them.
            select = ", ".join(f"{col}::text" for col in cols)
            rows = c.execute(f"SELECT {select} FROM {table} WHERE {cond}", (arg,)).fetchall()
            data[table] = (cols, rows)
            c.execute(f"DROP TABLE IF EXISTS raw_{table}")
            c.execute(f"CREATE TABLE raw_{table} (LIKE {table} INCLUDING ALL)")
        c.commit()
        total = sum(len(rows) for _, rows in data.values())
        times = []
        for _ in range(repeat):
            for table in data:
                c.execute(f"TRUNCATE raw_{table}")
            c.execute("CHECKPOINT")  # each run starts from the same clean state
            c.commit()
            t0 = time.perf_counter()
            with c.cursor() as cur:
                for table, (cols, rows) in data.items():
                    with cur.copy(f"COPY raw_{table} ({', '.join(cols)}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
            c.commit()
            times.append(time.perf_counter() - t0)
        return times, total


def main() -> None:
    global DB
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--single", type=int, default=400)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--db", default=DB, help="another scratch database (rms_bench…)")
    args = parser.parse_args()
    DB = args.db
    common.setup_database(DB)
    try:
        token = common.create_api_client("bench-ingest", db=DB)
        with common.Server(db=DB, workers=2, threads=4) as server:
            api = common.Api(server.port, token, timeout=120)
            ids = create_objects(api, args.objects)
            api.close()
            print(f"# {len(ids)} objects; sessions of {INJECTIONS} injections + {SIGNALS} signals")
            run_single(server.port, token, ids, 40, 1)  # warm-up
            seq = run_single(server.port, token, ids, args.single, 1)
            par = run_single(server.port, token, ids, args.single, 4)
            run_batches(server.port, token, ids, 1)  # warm-up
            mark = common.sql("SELECT now()::text", db=DB)[0][0]
            bat = run_batches(server.port, token, ids, args.batches)
        raw_times, raw_rows = raw_copy_floor(mark)
        raw_s = min(raw_times)
        batch_rate = bat["sessions"] * EVENTS / bat["wall"]
        raw_rate = bat["sessions"] * EVENTS / raw_s
        rows = [
            [
                "single, 1 client",
                seq["sessions"],
                f"{seq['sessions'] / seq['wall']:.0f}",
                f"{seq['sessions'] * EVENTS / seq['wall']:.0f}",
                f"{seq['p'][50]:.1f} / {seq['p'][95]:.1f} / {seq['p'][99]:.1f}",
                seq["errors"],
            ],
            [
                "single, 4 clients",
                par["sessions"],
                f"{par['sessions'] / par['wall']:.0f}",
                f"{par['sessions'] * EVENTS / par['wall']:.0f}",
                f"{par['p'][50]:.1f} / {par['p'][95]:.1f} / {par['p'][99]:.1f}",
                par["errors"],
            ],
            [
                "batch of 500, 1 client",
                bat["sessions"],
                f"{bat['sessions'] / bat['wall']:.0f}",
                f"{batch_rate:.0f}",
                f"{statistics.median(bat['per_batch']) * 1000:.0f} ms a batch",
                bat["errors"],
            ],
            [
                "raw COPY of the same rows",
                bat["sessions"],
                f"{bat['sessions'] / raw_s:.0f}",
                f"{raw_rate:.0f}",
                f"{raw_rows} rows in {raw_s:.2f} s (best of "
                f"{' / '.join(f'{t:.2f}' for t in raw_times)})",
                0,
            ],
        ]
        common.print_table(
            ["path", "sessions", "sessions/s", "events/s", "latency ms p50/p95/p99", "errors"], rows
        )
        print(
            f"batch / raw COPY = {batch_rate / raw_rate:.1%} (target ≥ 25%); "
            f"batch events/s = {batch_rate:.0f} (target ≥ 5,000); "
            f"single p50 = {seq['p'][50]:.1f} ms (target ≤ 15 ms)"
        )
    finally:
        common.drop_database(DB)


if __name__ == "__main__":
    main()
