"""Where a 500-session batch's time goes, in-process (no HTTP server), and how to A/B a change.

Posts ``--batches`` batches of 500 sessions (the shape of ``bench_ingest.py``: 10 injections and
3 signals each) through Django's test client against a fresh PostgreSQL database, after one
warm-up batch, and prints per batch: wall time, this process's CPU, and the CPU of the database
backend serving it. Then the stages of ``feedback.ingest`` (wall, and the part of it this thread
spent waiting), wrapped by timers in this process only.

Wall-clock A/B runs on a shared VM drift by 15-25 % within minutes. To judge a Python-side change
count instructions instead, which repeat within ~0.15 % for the same code:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/profile_ingest.py --batches 2 --callgrind
    grep ^totals /tmp/cg.out

With ``--callgrind`` the script switches instrumentation on (``callgrind_control -i on``) only
around the timed batches, so setup and imports are not counted; the sessions come from a fixed
seed. A change whose gain is PostgreSQL waiting less shows in the ``waited`` column instead.

    .venv/bin/python bench/profile_ingest.py [--batches 8] [--objects 5000] [--callgrind]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_profile_ingest"
KIND = "ASSERTED"
SIZE = 500
TIMES: dict[str, list[float]] = {}  # stage: [calls, wall, cpu]


def backend_cpu(connection) -> float:
    """CPU seconds of the PostgreSQL backend behind Django's connection (same machine)."""
    pid = connection.connection.info.backend_pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def callgrind(switch: str) -> None:
    subprocess.run(["callgrind_control", "-i", switch, str(os.getpid())], check=True)


def main() -> int:
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--callgrind", action="store_true", help="run under valgrind, see above")
    args = parser.parse_args()
    common.setup_database(DB)
    try:
        token = common.create_api_client("profile-ingest", db=DB)
        common.django_setup(DB)
        import bench_ingest
        from django.db import connection
        from django.test import Client

        from feedback import ingest, planner

        for name in ("load_state", "_write_events", "_record"):
            common.time_calls(ingest, name, TIMES)
        for name in ("_check", "_plan"):
            common.time_calls(planner.SessionPlan, name, TIMES)
        client = Client(HTTP_AUTHORIZATION=f"Token {token}")
        ids: list[str] = []
        for start in range(0, args.objects, 1000):
            body = [
                {
                    "namespace": common.BENCH_NAMESPACE,
                    "content": f"fact {i}",
                    "epistemic_type": KIND,
                }
                for i in range(start, min(args.objects, start + 1000))
            ]
            answer = client.post("/api/v1/objects", json.dumps(body), "application/json")
            assert answer.status_code == 201, answer.content[:300]
            ids += [o["id"] for o in answer.json()]
        rng = random.Random(args.seed)
        bodies = [
            json.dumps([bench_ingest.session_body(rng, ids, f"p{b}") for _ in range(SIZE)])
            for b in range(args.batches + 1)
        ]

        def post(body: str) -> None:
            answer = client.post("/api/v1/feedback-sessions/batch", body, "application/json")
            results = answer.json()["results"] if answer.status_code == 207 else None
            assert results and {r["status"] for r in results} == {201}, answer.content[:300]

        post(bodies[0])  # warm-up
        TIMES.clear()
        rows = []
        if args.callgrind:
            callgrind("on")
        for body in bodies[1:]:
            pg0, t0, c0 = backend_cpu(connection), time.perf_counter(), time.process_time()
            post(body)
            rows.append(
                (
                    time.perf_counter() - t0,
                    time.process_time() - c0,
                    backend_cpu(connection) - pg0,
                )
            )
        if args.callgrind:
            callgrind("off")
    finally:
        common.drop_database(DB)

    n = len(rows)
    events = SIZE * bench_ingest.EVENTS
    table = [
        [k + 1, f"{wall * 1000:.0f}", f"{cpu * 1000:.0f}", f"{pg * 1000:.0f}"]
        for k, (wall, cpu, pg) in enumerate(rows)
    ]
    common.print_table(["batch", "wall ms", "python CPU ms", "PostgreSQL CPU ms"], table)
    wall = statistics.median(r[0] for r in rows)
    print(f"median {wall * 1000:.0f} ms a batch = {events / wall:,.0f} events/s in-process")
    print()
    stages = [
        [name, f"{spent * 1000 / n:.0f}", f"{(spent - cpu) * 1000 / n:.0f}"]
        for name, (_, spent, cpu) in TIMES.items()
    ]
    common.print_table(["stage (feedback.ingest)", "ms a batch", "waited ms"], stages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
