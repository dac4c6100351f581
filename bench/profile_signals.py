"""Where the time of one POST /objects/{id}/signals goes, in-process (no HTTP server).

Posts ``--signals`` signals (random CONFIRMED / REFERENCED / CORRECTED, random sessions) one at a
time through Django's test client against a fresh PostgreSQL database, with timers wrapped around
the stages of ``feedback.services.signal_record`` (in this process only; no file is changed), and
prints per-stage wall and CPU milliseconds per request, queries per request and the time spent
waiting on PostgreSQL. Stages that no longer exist in the code are reported as missing.

    .venv/bin/python bench/profile_signals.py [--signals 1000] [--objects 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_profile"
TIMES: dict[str, list[float]] = {}  # label: [calls, wall, cpu]


CATALOGS = ("pg_class", "pg_attribute", "pg_type", "pg_depend")


def catalog_writes() -> dict[str, int]:
    """Rows inserted + deleted in the system catalogs of the profiled database (temporary tables
    write these: a CREATE/DROP per request shows up here)."""
    rows = common.sql(
        "SELECT relname, n_tup_ins + n_tup_del FROM pg_stat_sys_tables "
        "WHERE relname = ANY(%s) ORDER BY relname",
        (list(CATALOGS),),
        db=DB,
    )
    return dict(rows)


def wal_lsn() -> int:
    return common.sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn", db=DB)[0][0]


def statement_kind(sql: str) -> str:
    """``SELECT rms_memoryobject``, ``UPDATE feedback_feedbackaggregate``, ``CREATE TEMP``..."""
    words = sql.split()
    verb = " ".join(words[:2]).upper() if words[:1] in (["CREATE"], ["DROP"]) else words[0]
    quoted = sql.split('"')
    if verb.upper() in ("SELECT", "UPDATE", "INSERT", "DELETE") and len(quoted) > 1:
        table = quoted[1]
        if verb.upper() == "SELECT" and " FOR UPDATE" in sql:
            verb += " ... FOR UPDATE"
        return f"{verb} {table}"
    return verb


def instrument() -> list[str]:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models import Model
    from django.db.models.query import QuerySet

    from feedback import services as fs
    from feedback.api import views as fviews
    from rms import selectors as core_selectors
    from rms import services as core
    from rms.api import auth, throttling

    try:
        from rms import store

        bulk = type(store.get())
    except ImportError:  # older tree: Django's bulk_create / bulk_update only
        bulk = None
    missing: list[str] = []

    def w(owner, name: str, label) -> None:
        common.time_calls(owner, name, TIMES, label, missing)

    w(auth.ApiTokenAuthentication, "authenticate", "auth: token lookup (SELECT api client)")
    w(throttling.ClientRateThrottle, "allow_request", "throttle (cache read + write)")
    w(fviews, "validated", "SignalIn validation")
    w(fviews, "body_hash", "body hash (canonical JSON + SHA-256)")
    w(core_selectors, "visible_object", "lock: SELECT ... FOR UPDATE + namespace check")
    w(core, "load_tallies", "load tallies (SELECT tallies)")
    w(core, "signal_ops", "policy + 2 operations + hashes (signal_ops)")
    w(fs, "load_aggregates", "load aggregates (SELECT aggregate)")
    w(Model, "save", lambda obj, *a: f"{type(obj).__name__}.save()")
    w(QuerySet, "bulk_create", lambda qs, *a: f"QuerySet.bulk_create {qs.model.__name__}")
    w(QuerySet, "bulk_update", lambda qs, *a: f"QuerySet.bulk_update {qs.model.__name__}")
    if bulk is not None:
        w(bulk, "insert", lambda db, model, *a: f"rms.store insert {model.__name__}")
        w(bulk, "update", lambda db, model, *a: f"rms.store update {model.__name__}")
    w(fs, "signal_answer", "render answer (objects_out + SELECT aggregate)")
    w(BaseDatabaseWrapper, "commit", "COMMIT")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--wait-quiet", type=float, default=30.0)
    args = parser.parse_args(argv)
    common.stop_on_sigterm()
    if not (1 <= args.signals <= 50_000 and 1 <= args.objects <= 1000 and args.warmup <= 5000):
        parser.error("bounded: signals 1-50,000, objects 1-1,000, warmup up to 5,000")

    common.setup_database(DB)
    token = common.create_api_client("bench-profile", db=DB)
    common.django_setup(DB)
    from django.db import connection, connections
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    items = [
        {"namespace": common.BENCH_NAMESPACE, "content": f"profiled fact {i}",
         "epistemic_type": "OBSERVED"}
        for i in range(args.objects)
    ]  # fmt: skip
    r = client.post("/api/v1/objects", json.dumps(items), content_type="application/json")
    if r.status_code != 201:
        raise RuntimeError(f"POST /objects -> {r.status_code}")
    ids = [o["id"] for o in r.json()]
    rng = random.Random(5)

    def post_one() -> None:
        body = {
            "signal_type": rng.choice(("CONFIRMED", "REFERENCED", "CORRECTED")),
            "session_id": f"s-{rng.randrange(500)}",
            "actor_id": "profiler",
            "actor_type": "HUMAN_USER",
        }
        resp = client.post(
            f"/api/v1/objects/{rng.choice(ids)}/signals",
            json.dumps(body),
            content_type="application/json",
        )
        if resp.status_code != 201:
            raise RuntimeError(f"signal -> {resp.status_code}: {resp.content[:200]!r}")

    missing = instrument()
    for _ in range(args.warmup):
        post_one()
    TIMES.clear()
    db = {"n": 0, "wall": 0.0}
    kinds: dict[str, list] = defaultdict(lambda: [0, 0.0])

    def count_sql(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - t0
            db["n"] += 1
            db["wall"] += took
            kind = kinds[statement_kind(sql)]
            kind[0] += 1
            kind[1] += took

    common.wait_for_quiet(args.wait_quiet)
    n = args.signals
    catalog0, wal0 = catalog_writes(), wal_lsn()
    with connection.execute_wrapper(count_sql):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            post_one()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    wal1 = wal_lsn()
    time.sleep(1.5)  # backends flush their table statistics at most once a second
    catalog1 = catalog_writes()

    print(
        f"\n== one signal, in-process, serial: {n:,} signals over {args.objects} objects, "
        f"{1000 * wall / n:.2f} ms wall and {1000 * cpu / n:.2f} ms CPU each "
        f"({n / wall:,.0f}/s on one core)"
    )
    print(
        f"{db['n'] / n:.1f} SQL statements per signal (BEGIN/COMMIT not counted), "
        f"{1000 * db['wall'] / n:.2f} ms per signal inside cursor.execute (PostgreSQL + driver)"
    )
    print(
        f"{(wal1 - wal0) / n:,.0f} bytes of WAL per signal (cluster-wide: includes anything "
        f"else writing meanwhile); system-catalog rows inserted + deleted per signal: "
        + ", ".join(f"{k} {(catalog1[k] - catalog0.get(k, 0)) / n:.1f}" for k in catalog1)
    )
    rows = []
    for label, (calls, w_sum, c_sum) in sorted(TIMES.items(), key=lambda kv: -kv[1][1]):
        rows.append([
            label, f"{calls / n:.2f}", f"{1000 * w_sum / n:.3f}", f"{1000 * c_sum / n:.3f}",
            f"{100 * c_sum / cpu:.0f}%",
        ])  # fmt: skip
    common.print_table(["stage", "calls/signal", "wall ms", "CPU ms", "of CPU"], rows)
    print()
    common.print_table(
        ["SQL statement (via cursor.execute; COPY not listed)", "per signal", "wall ms"],
        [
            [k, f"{c / n:.2f}", f"{1000 * t / n:.3f}"]
            for k, (c, t) in sorted(kinds.items(), key=lambda kv: -kv[1][1])
        ],
    )
    if missing:
        print("stages not found (code changed?): " + ", ".join(missing))
    connections.close_all()
    with contextlib.suppress(Exception):
        common.drop_database(DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
