"""Signals per second through the HTTP API, against PostgreSQL and a real gunicorn.

Two phases, each ``--seconds`` long with ``--threads`` concurrent keep-alive clients posting a
random mix of CONFIRMED / REFERENCED / CORRECTED signals with random session ids:

  one   every signal to ONE object: all writers queue on that object's row lock;
  many  signals spread over ``--objects`` objects (created first in POSTs of 1,000).

Each phase reports signals/s, latency percentiles, errors (any non-201) and a correctness check:
every signal writes exactly two operations (FEEDBACK_EVENT + REINFORCE/PENALTY; UNUSED is never
sent), so an object's ``version`` must be 1 + 2 x the signals it was sent (no lost updates); the
hot object's hash chain and replay are verified too.

    .venv/bin/python bench/bench_signals.py [--seconds 10] [--threads 8] [--objects 1000]

Exit status 1 if any request failed or any check did not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

SIGNAL_TYPES = ("CONFIRMED", "REFERENCED", "CORRECTED")
ACTOR_TYPES = ("HUMAN_USER", "SYSTEM_PROCESS", "AI_AGENT")
SESSIONS = 500  # random session ids are drawn from this many
OBJECTS_PER_POST = 1000  # API.md limit
MAX_ERRORS_KEPT = 5


@dataclass
class Phase:
    name: str
    threads: int
    seconds: float
    ok: int = 0
    errors: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    sent: Counter = field(default_factory=Counter)
    uncertain: Counter = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    cpu: common.CpuMeter | None = None
    lock_waiting: float = 0.0
    active: float = 0.0
    checks: list[tuple[str, bool, str]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.ok / self.elapsed if self.elapsed else 0.0


def signal_body(rng: random.Random, thread: int) -> dict:
    actor_type = rng.choice(ACTOR_TYPES)
    body = {
        "signal_type": rng.choice(SIGNAL_TYPES),
        "session_id": f"s-{rng.randrange(SESSIONS)}",
        "actor_id": f"bench-actor-{thread}",
        "actor_type": actor_type,
    }
    if actor_type == "AI_AGENT" and rng.random() < 0.5:
        body["evidence_ids"] = [f"doc-{rng.randrange(50)}"]
    return body


class LockSampler(threading.Thread):
    """Samples pg_stat_activity every 0.25 s: backends running a query, and those waiting on a
    lock (the row lock of a hot object shows up here)."""

    def __init__(self, db: str) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.stop_event = threading.Event()
        self.samples: list[tuple[int, int]] = []

    def run(self) -> None:
        import psycopg

        query = (
            "SELECT count(*) FILTER (WHERE state = 'active'), "
            "count(*) FILTER (WHERE wait_event_type = 'Lock') "
            "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(
            host=common.HOST,
            port=common.PG_PORT,
            user="postgres",
            dbname="postgres",
            autocommit=True,
        ) as conn:
            while not self.stop_event.wait(0.25):
                active, waiting = conn.execute(query, (self.db,)).fetchone()
                self.samples.append((active, waiting))

    def means(self) -> tuple[float, float]:
        if not self.samples:
            return 0.0, 0.0
        n = len(self.samples)
        return sum(a for a, _ in self.samples) / n, sum(w for _, w in self.samples) / n


def run_phase(
    phase: Phase,
    server: common.Server,
    token: str,
    targets: list[str],
    warm_target: str,
    warmup: int,
    db: str,
) -> Phase:
    """``phase.threads`` threads post signals to random ``targets`` for ``phase.seconds``."""
    lock = threading.Lock()
    deadline_box: list[float] = []
    # The clock starts when every thread has warmed up (the barrier's action runs once, first).
    barrier = threading.Barrier(
        phase.threads + 1,
        action=lambda: deadline_box.extend(
            [time.perf_counter(), time.perf_counter() + phase.seconds]
        ),
    )

    def worker(index: int) -> None:
        rng = random.Random(f"{phase.name}-{index}")
        api = common.Api(server.port, token)
        latencies: list[float] = []
        sent: Counter = Counter()
        uncertain: Counter = Counter()
        ok = errors = 0
        samples: list[str] = []
        try:
            for _ in range(warmup):  # connections, worker imports, plan caches; not measured
                api.request(
                    "POST",
                    f"/api/v1/objects/{warm_target}/signals",
                    signal_body(rng, index),
                    parse=False,
                )
        except (OSError, http.client.HTTPException):
            api.reconnect()
        barrier.wait()
        # A fresh connection: one that sat idle at the barrier longer than gunicorn's keep-alive
        # (2 s) has been closed by the server and would fail with a broken pipe.
        api.reconnect()
        deadline = deadline_box[1]
        while True:
            now = time.perf_counter()
            if now >= deadline:
                break
            target = targets[rng.randrange(len(targets))] if len(targets) > 1 else targets[0]
            path = f"/api/v1/objects/{target}/signals"
            t0 = time.perf_counter()
            try:
                status, raw = api.request("POST", path, signal_body(rng, index), parse=False)
            except (OSError, http.client.HTTPException) as exc:
                errors += 1
                uncertain[target] += 1  # the server may or may not have committed it
                if len(samples) < MAX_ERRORS_KEPT:
                    samples.append(f"{type(exc).__name__}: {exc}")
                api.reconnect()
                continue
            latencies.append(time.perf_counter() - t0)
            if status == 201:
                ok += 1
                sent[target] += 1
            else:
                errors += 1
                if len(samples) < MAX_ERRORS_KEPT:
                    samples.append(f"{status}: {raw[:200]!r}")
        api.close()
        with lock:
            phase.ok += ok
            phase.errors += errors
            phase.latencies.extend(latencies)
            phase.sent.update(sent)
            phase.uncertain.update(uncertain)
            phase.error_samples.extend(samples[: MAX_ERRORS_KEPT - len(phase.error_samples)])

    threads = [
        threading.Thread(target=worker, args=(i,), daemon=True) for i in range(phase.threads)
    ]
    for t in threads:
        t.start()
    sampler = LockSampler(db)
    barrier.wait(timeout=300)
    with common.CpuMeter(server.proc.pid if server.proc else None, db) as cpu:
        sampler.start()
        for t in threads:
            t.join(timeout=phase.seconds + 120)
        phase.elapsed = time.perf_counter() - deadline_box[0]
        sampler.stop_event.set()
        sampler.join(timeout=5)
    phase.cpu = cpu
    phase.active, phase.lock_waiting = sampler.means()
    if any(t.is_alive() for t in threads):
        phase.errors += 1
        phase.error_samples.append("a client thread did not finish in time")
    return phase


def create_objects(api: common.Api, count: int, tag: str) -> tuple[list[str], float]:
    """``count`` OBSERVED objects in POSTs of up to 1,000; returns (ids, seconds)."""
    ids: list[str] = []
    t0 = time.perf_counter()
    for start in range(0, count, OBJECTS_PER_POST):
        items = [
            {
                "namespace": common.BENCH_NAMESPACE,
                "content": f"{tag} fact {i}: the user prefers option {i % 7}",
                "domain_tags": [tag, f"t{i % 10}"],
                "epistemic_type": "OBSERVED",
                "actor_id": "bench-extractor",
                "actor_type": "AI_AGENT",
                "evidence_ids": [f"src-{i}"],
            }
            for i in range(start, min(count, start + OBJECTS_PER_POST))
        ]
        status, body = api.request("POST", "/api/v1/objects", items)
        if status != 201:
            raise RuntimeError(f"POST /objects -> {status}: {str(body)[:300]}")
        ids.extend(obj["id"] for obj in body)
    return ids, time.perf_counter() - t0


def check_versions(api: common.Api, phase: Phase, ids: list[str]) -> None:
    """Every object: version == 1 + 2 x signals answered 201 (none lost, none doubled)."""
    if len(ids) == 1:
        status, body = api.request("GET", f"/api/v1/objects/{ids[0]}")
        if status != 200:
            raise RuntimeError(f"GET object -> {status}")
        versions = {ids[0]: body["version"]}
    else:
        items = api.get_all(f"/api/v1/objects?namespace={common.BENCH_NAMESPACE}&page_size=1000")
        versions = {o["id"]: o["version"] for o in items}
    bad = [
        (oid, versions.get(oid), 1 + 2 * phase.sent[oid])
        for oid in ids
        if not phase.uncertain[oid] and versions.get(oid) != 1 + 2 * phase.sent[oid]
    ]
    total = sum(versions.get(oid, 0) for oid in ids)
    expected = len(ids) + 2 * phase.ok
    detail = f"sum(version) = {total:,}, expected {len(ids)} + 2 x {phase.ok:,} = {expected:,}"
    if bad:
        detail += f"; {len(bad)} objects differ, e.g. {bad[:3]}"
    ok = not bad and (phase.errors or total == expected)
    phase.checks.append(("version == 1 + 2 x signals", ok, detail))


def check_log(phase: Phase, ids: list[str], db: str) -> None:
    """Operations in the log for these objects == their versions (one row per version)."""
    rows = common.sql(
        "SELECT count(*), count(DISTINCT target_id) FROM rms_operation "
        "WHERE target_id = ANY(%s::uuid[])",
        (ids,),
        db=db,
    )
    n_ops, n_targets = rows[0]
    expected = len(ids) + 2 * phase.ok
    ok = n_ops == expected or bool(phase.errors)
    phase.checks.append(
        (
            "operations in the log",
            ok,
            f"{n_ops:,} rows on {n_targets} objects, expected {expected:,}",
        )
    )


def check_replay(phase: Phase, object_id: str, db: str) -> None:
    """Hash chain intact and the fold of the log equal to the row (SPEC §6), in-process."""
    common.django_setup(db)
    from django.db import connections

    from rms.models import MemoryObject
    from rms.verification import verify_object_chain, verify_object_replay

    obj = MemoryObject.objects.select_related("namespace").get(pk=object_id)
    broken = verify_object_chain(obj)
    mismatches = verify_object_replay(obj)
    connections.close_all()
    phase.checks.append(
        (
            "hash chain + replay of the hot object",
            broken is None and not mismatches,
            f"chain break: {broken}; replay mismatches: {mismatches[:3]}",
        )
    )


def report(phase: Phase) -> None:
    pct = common.percentiles(phase.latencies)
    ms = {p: v * 1000 for p, v in pct.items()}
    mean = 1000 * sum(phase.latencies) / len(phase.latencies) if phase.latencies else 0.0
    print(f"\n== phase {phase.name}: {phase.threads} threads, {phase.elapsed:.1f} s")
    common.print_table(
        ["signals", "errors", "signals/s", "mean ms", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [[
            f"{phase.ok:,}", phase.errors, common.fmt_rate(phase.rate), f"{mean:.1f}",
            f"{ms[50]:.1f}", f"{ms[95]:.1f}", f"{ms[99]:.1f}",
            f"{1000 * max(phase.latencies, default=0):.1f}",
        ]],
    )  # fmt: skip
    if phase.cpu is not None:
        print(phase.cpu.summary())
        print(phase.cpu.per_item(phase.ok).replace("per item", "per signal"))
    print(
        f"PostgreSQL backends (mean of samples): {phase.active:.1f} running a query, "
        f"{phase.lock_waiting:.1f} waiting on a lock"
    )
    for sample in phase.error_samples:
        print(f"  error: {sample}")
    for name, ok, detail in phase.checks:
        print(f"check {name}: {'OK' if ok else 'FAILED'} ({detail})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--threads", type=int, default=8, help="concurrent client connections")
    parser.add_argument("--objects", type=int, default=1000, help="objects of the 'many' phase")
    parser.add_argument("--phases", default="one,many", help="comma list of: one, many")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--server-threads", type=int, default=4, help="threads per worker")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured signals per thread")
    parser.add_argument(
        "--redis",
        action="store_true",
        help="REDIS_URL=redis://127.0.0.1:6379/15 (throttle counters in Redis, as deployed)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=30.0,
        help="before each phase wait up to this many seconds for the machine to be idle",
    )
    parser.add_argument("--keep-db", action="store_true", help="do not drop rms_bench at the end")
    args = parser.parse_args(argv)
    common.stop_on_sigterm()
    if not 1 <= args.threads <= 64 or not 0 < args.seconds <= 600 or not 1 <= args.objects <= 20000:
        parser.error("bounded: 1-64 threads, up to 600 s, 1-20,000 objects")
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not set(phases) <= {"one", "many"}:
        parser.error("--phases: one, many")

    db = common.BENCH_DB
    redis_url = "redis://127.0.0.1:6379/15" if args.redis else None
    print(
        f"# bench_signals: {args.threads} client threads, {args.seconds:g} s a phase, "
        f"PostgreSQL, gunicorn {args.workers}x{args.server_threads} gthread, "
        f"cache {'Redis' if redis_url else 'local memory'}"
    )
    common.setup_database(db)
    token = common.create_api_client("bench-client", db=db)
    results: list[Phase] = []
    try:
        with common.Server(
            db=db, workers=args.workers, threads=args.server_threads, redis_url=redis_url
        ) as server:
            api = common.Api(server.port, token)
            (warm,), _ = create_objects(api, 1, "warm")
            for name in phases:
                if name == "one":
                    targets, _ = create_objects(api, 1, "hot")
                else:
                    targets, took = create_objects(api, args.objects, "many")
                    print(
                        f"# created {len(targets):,} objects in {took:.2f} s "
                        f"({len(targets) / took:,.0f} objects/s, POSTs of up to "
                        f"{OBJECTS_PER_POST})"
                    )
                common.wait_for_quiet(args.wait_quiet)
                phase = run_phase(
                    Phase(name, args.threads, args.seconds),
                    server,
                    token,
                    targets,
                    warm,
                    args.warmup,
                    db,
                )
                api.reconnect()  # the idle keep-alive connection may have been closed
                check_versions(api, phase, targets)
                check_log(phase, targets, db)
                if name == "one":
                    check_replay(phase, targets[0], db)
                results.append(phase)
                report(phase)
            api.close()
    finally:
        if not args.keep_db:
            with contextlib.suppress(Exception):
                common.drop_database(db)

    print("\n== summary")
    common.print_table(
        ["phase", "threads", "signals/s", "p50 ms", "p95 ms", "p99 ms", "errors", "checks",
         "other load"],
        [
            [
                p.name, p.threads, common.fmt_rate(p.rate),
                *(f"{1000 * v:.1f}" for v in common.percentiles(p.latencies).values()),
                p.errors, "OK" if all(ok for _, ok, _ in p.checks) else "FAILED",
                f"{p.cpu.other_share:.0f}%" if p.cpu else "-",
            ]
            for p in results
        ],
    )  # fmt: skip
    failed = any(p.errors or not all(ok for _, ok, _ in p.checks) for p in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
