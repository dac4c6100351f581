"""Worker tasks: whole-log verification speed and memory, and the simulations' wall time.

1. Builds an operation log of about ``--ops`` operations in a scratch PostgreSQL database
   (``rms_bench_worker``, dropped and recreated; 127.0.0.1:5432, user postgres): ``--objects``
   objects, then feedback sessions through ``feedback.ingest.record_sessions`` (the batch
   endpoint's engine) in batches of 500 sessions. Each session injects ``--inject`` objects and
   reports a few signals, so each object's chain holds injections, FEEDBACK_EVENTs, REINFORCE
   and PENALTY operations; every session adds its own FEEDBACK_SESSION chain.
2. Runs ``verify_replay`` and ``verify_chain`` (the task kinds, via ``feedback.tasks.run_task``
   exactly as the worker does) each in a fresh process, at a quarter of the log and at the whole
   log, reporting operations per second and the process's peak RSS (``getrusage``): the same
   peak at 4x the operations is the bounded memory the chunked streaming promises.
3. Times each simulation kind through ``run_task`` with default and with maximal parameters.

    .venv/bin/python bench/bench_worker.py [--ops 1000000] [--objects 2000] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import common  # noqa: E402

DB = "rms_bench_worker"
BATCH = 500  # sessions per record_sessions call (the batch endpoint's maximum)
SIGNALS = ("REFERENCED", "REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORRECTED")
HUMAN = {"actor_id": "user-1", "actor_type": "HUMAN_USER"}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_rss() -> bool:
    """Reset the peak-RSS mark (Linux >= 4.0), so ``getrusage`` reports the peak of what runs
    next, not of the imports before it. False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def current_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- building the log ---------------------------------------------------------------------------


def session_body(rng: random.Random, k: int, ids: list[str], inject: int, ts) -> dict:
    injected = rng.sample(ids, inject)
    signals = []
    for oid in rng.sample(injected, rng.randint(1, 3)):
        kind = rng.choice(SIGNALS)
        extra = HUMAN if kind in ("CONFIRMED", "CORRECTED") else {}
        signals.append({"object_id": oid, "signal_type": kind, **extra})
    return {
        "session_id": f"conv-{k % 997}",
        "request_id": f"req-{k}",
        "namespace_scope": [common.BENCH_NAMESPACE],
        "context_budget": 4096,
        "tokens_used": rng.randint(500, 4000),
        "outcome": rng.choice(("SUCCESS", "PARTIAL", "FAILED")),
        "ts": ts.isoformat(),
        "injections": [
            {
                "object_id": oid,
                "rank_position": i + 1,
                "token_cost": rng.randint(20, 200),
                "composite_score": round(rng.random(), 4),
            }
            for i, oid in enumerate(injected)
        ],  # fmt: skip
        "signals": signals,
    }


def build(args, on_checkpoint=None) -> dict:
    """Objects, then sessions until the log holds ``args.ops`` operations; returns timings."""
    from django.utils import timezone

    from feedback.api.views import session_item
    from feedback.ingest import record_sessions
    from rms import services
    from rms.models import ApiClient, Operation
    from taskruns import enqueue

    # The after-session sweep trigger would queue messages nobody consumes here.
    enqueue.sweep_objects = lambda ids: None
    common.create_api_client("bench-writer", role="client", db=DB)
    client = ApiClient.objects.get(name="bench-writer")
    rng = random.Random(args.seed)
    start_ts = timezone.now() - timedelta(days=30)
    t0 = time.perf_counter()
    ids: list[str] = []
    for first in range(0, args.objects, 1000):
        items = [
            {"namespace": common.BENCH_NAMESPACE, "content": f"bench fact {i}",
             "epistemic_type": rng.choice(("OBSERVED", "ASSERTED", "INFERRED")),
             "ts": start_ts}
            for i in range(first, min(args.objects, first + 1000))
        ]  # fmt: skip
        ids += [str(o.pk) for o in services.object_create(client=client, items=items)]
    objects_s = time.perf_counter() - t0

    ops = Operation.objects.count()
    sessions = 0
    sessions_s = 0.0
    pending_checkpoint = on_checkpoint is not None
    while ops < args.ops:
        t1 = time.perf_counter()
        bodies = [
            session_body(
                rng, sessions + j, ids, args.inject, start_ts + timedelta(seconds=sessions + j + 1)
            )
            for j in range(BATCH)
        ]
        results = record_sessions(client=client, items=[session_item(b) for b in bodies])
        sessions_s += time.perf_counter() - t1
        bad = [r for r in results if r[0] != 201]
        if bad:
            raise RuntimeError(f"session batch refused: {bad[:2]}")
        sessions += BATCH
        ops = Operation.objects.count()
        if sessions % (BATCH * 20) == 0:
            print(f"#   {ops:,} operations after {sessions:,} sessions", flush=True)
        if pending_checkpoint and ops >= args.ops // 4:
            pending_checkpoint = False
            on_checkpoint(ops)  # not counted in the build time
    return {
        "objects": len(ids),
        "objects_s": objects_s,
        "sessions": sessions,
        "sessions_s": sessions_s,
        "ops": ops,
    }


# --- one verification in a fresh process ------------------------------------------------------


def floor_child() -> None:
    """The floor of a rebuild: stream the rows the rebuild folds (same filter, same seq order,
    JSON decoded) out of PostgreSQL through a server-side cursor and discard them."""
    import psycopg

    common.django_setup(DB)
    from feedback.rebuild import OP_TYPES

    baseline = current_rss_mib()
    reset = reset_peak_rss()
    t0 = time.perf_counter()
    rows = 0
    with (
        psycopg.connect(host=common.HOST, port=common.PG_PORT, user="postgres", dbname=DB) as c,
        c.cursor(name="floor") as cur,
    ):
        cur.itersize = 5000
        cur.execute(
            "SELECT op_type, target_id, ts, payload FROM rms_operation "
            "WHERE op_type = ANY(%s) ORDER BY seq",
            (list(OP_TYPES),),
        )
        for _ in cur:
            rows += 1
    print(
        json.dumps(
            {
                "state": "succeeded",
                "seconds": time.perf_counter() - t0,
                "rows": rows,
                "baseline_rss_mib": baseline,
                "peak_rss_mib": peak_rss_mib(),
                "peak_is_of_the_run": reset,
            }
        )
    )


def child(kind: str) -> None:
    """Run one task kind the way the worker does; print JSON figures on the last line."""
    if kind == "floor":
        floor_child()
        return
    common.django_setup(DB)
    from taskruns import tasks
    from taskruns.models import TaskRun

    run = TaskRun.objects.create(kind=kind, params={}, created_by="bench")
    baseline = current_rss_mib()
    reset = reset_peak_rss()
    t0 = time.perf_counter()
    state = tasks.run_task.run(str(run.pk))
    seconds = time.perf_counter() - t0
    run.refresh_from_db()
    result = run.result or {}
    print(
        json.dumps(
            {
                "state": state,
                "error": run.error,
                "seconds": seconds,
                "ok": result.get("ok"),
                "checked": result.get("checked"),
                "operations": result.get("operations"),
                "mismatches": result.get("mismatch_count"),
                "objects": result.get("objects"),
                "baseline_rss_mib": baseline,
                "peak_rss_mib": peak_rss_mib(),
                "peak_is_of_the_run": reset,
            }
        )
    )


def verify_in_child(kind: str) -> dict:
    return common.run_child(__file__, "--child", kind, db=DB)


def verify_round(label: str, rows: list) -> bool:
    ok = True
    for kind in ("verify_replay", "verify_chain"):
        r = verify_in_child(kind)
        ok = ok and r["state"] == "succeeded" and r["ok"] is True
        rows.append(
            [
                label,
                kind,
                f"{r['operations']:,}",
                f"{r['checked']:,}",
                f"{r['seconds']:.1f}",
                common.fmt_rate(r["operations"] / r["seconds"]),
                f"{r['baseline_rss_mib']:.0f}",
                f"{r['peak_rss_mib']:.0f}",
                r["mismatches"],
            ]
        )
        print(f"#   {label} {kind}: {r}", flush=True)
    return ok


# --- simulations --------------------------------------------------------------------------------

SIMULATIONS = [
    ("stability_simulation", {}),
    ("stability_simulation", {"sessions": 1000, "corpus_size": 1000, "injected_per_session": 100}),
    ("precision_simulation", {}),
    ("precision_simulation", {"sessions": 1000, "relevant": 1000, "wrong": 1000, "filler": 1000}),
    ("benchmark_suite", {}),
]


def simulations(rows: list) -> bool:
    from taskruns import kinds, tasks
    from taskruns.models import TaskRun

    ok = True
    for kind, params in SIMULATIONS:
        clean = kinds.validate_params(kind, params)
        run = TaskRun.objects.create(kind=kind, params=clean, created_by="bench")
        t0 = time.perf_counter()
        state = tasks.run_task.run(str(run.pk))
        seconds = time.perf_counter() - t0
        run.refresh_from_db()
        ok = ok and state == "succeeded"
        shown = json.dumps(params) if params else "defaults"
        passed = run.result.get("passed") if run.result else run.error
        rows.append([kind, shown, f"{seconds:.2f}", passed])
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="operations to build")
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--inject", type=int, default=10, help="injections per session")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--rebuild-only",
        action="store_true",
        help="build the log, then only time rebuild_aggregates against the floor",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0

    common.stop_on_sigterm()
    print(f"# bench_worker: ~{args.ops:,} operations, {args.objects:,} objects, "
          f"{args.inject} injections per session, batches of {BATCH} sessions")  # fmt: skip
    print(f"# machine: {os.cpu_count()} CPUs, {common.machine_busy():.0f}% busy before the run")
    common.setup_database(DB)
    verify_rows: list = []
    ok = True
    try:
        common.django_setup(DB)

        def at_quarter(ops: int) -> None:
            nonlocal ok
            ok = verify_round(f"{ops:,} ops", verify_rows) and ok

        figures = build(args, on_checkpoint=None if args.rebuild_only else at_quarter)
        build_s = figures["objects_s"] + figures["sessions_s"]
        print()
        print(f"build: {figures['objects']:,} objects in {figures['objects_s']:.1f} s; "
              f"{figures['sessions']:,} sessions in {figures['sessions_s']:.1f} s "
              f"({common.fmt_rate(figures['sessions'] / figures['sessions_s'])} sessions/s, "
              f"{common.fmt_rate(figures['ops'] / build_s)} ops/s); "
              f"{figures['ops']:,} operations in {build_s:.1f} s")  # fmt: skip
        if not args.rebuild_only:
            ok = verify_round(f"{figures['ops']:,} ops", verify_rows) and ok
        print()
        common.print_table(
            ["log", "task", "operations", "targets", "seconds", "ops/s", "RSS before MiB",
             "peak RSS MiB", "mismatches"],
            verify_rows,
        )  # fmt: skip
        print()
        # Rebuild of every aggregate from the log (SPEC §8) beside the floor of one ordered pass.
        floor = verify_in_child("floor")
        rebuilt = verify_in_child("rebuild_aggregates")
        ok = ok and rebuilt["state"] == "succeeded"
        common.print_table(
            ["pass", "rows", "seconds", "peak RSS MiB"],
            [["stream the ordered rows (floor)", f"{floor['rows']:,}", f"{floor['seconds']:.1f}",
              f"{floor['peak_rss_mib']:.0f}"],
             ["rebuild_aggregates", f"{floor['rows']:,}", f"{rebuilt['seconds']:.1f}",
              f"{rebuilt['peak_rss_mib']:.0f}"]],
        )  # fmt: skip
        print(f"rebuild / floor = {rebuilt['seconds'] / floor['seconds']:.2f}x (target <= 3x)")
        print()
        if not args.rebuild_only:
            sim_rows: list = []
            ok = simulations(sim_rows) and ok
            common.print_table(["simulation", "params", "seconds", "passed"], sim_rows)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            common.drop_database(DB)
    print()
    print("bench_worker:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
