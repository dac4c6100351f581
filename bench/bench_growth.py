"""Growth curves: does the service slow down as its operation log grows tenfold?

One scratch PostgreSQL database (``rms_bench_growth``) is grown through the real write path —
the batch endpoint of a gunicorn server, 500 sessions of 10 injections + 3 signals a request
(24 operations a session) — to each of ``--sizes`` operations in turn. Traffic is spread evenly
over simulated time (sessions carry explicit, increasing ``ts``, ending before the real now), so
a 24-hour window always holds about the same traffic, as it would in a deployment running for
weeks: the log grows, the day does not.

At each size, with the growth paused, it measures:

  batch     ingestion throughput: ``--batches`` batches of 500 sessions, events/s;
  single    single-session latency, ``--samples`` sessions one at a time, p50/p95 ms;
  as_of     ``GET /objects/{id}/state?as_of=`` at a random time of a random object's history;
  ops list  ``GET /objects/{id}/operations``, the first and the last page of 20 of a random
            object (the last reached through the ``next`` link of a page just before it);
  feed      ``GET /changes?after=<cursor>&limit=1000`` from random positions of the whole log;
  overview  the dashboard overview's cold render (cache cleared), 24 h and 7 d windows,
            in a child process whose clock is the simulated now;
  sweep     the IGNORED_REPEATEDLY sweep over the candidates accumulated since the last size
            (SPEC §9), in a child process: CPU per decision (its process + its PostgreSQL
            backends) and wall time.

While it grows, and before each round, it vacuums the tables autovacuum would vacuum, by its
dead-row and insert rules and each table's own settings (``--no-vacuum``: leave it to the
server, whose CI configuration turns autovacuum off): the objects and aggregates are updated
on every write, and unvacuumed they grow with the log although their live rows do not; the
event tables' covering indexes answer alone only for vacuumed pages.

Each measurement is taken ``--rounds`` times at each size and the best round counts (the
fastest p50/p95, the highest throughput): the machine is shared, and a round slowed down by
other work says nothing about the log. Then it prints one table (a row per figure, a column per
size, and the ratio of the last size to the first; target: within 20 %) and writes ``--plot``
(an SVG of each figure relative to its value at the first size).

    .venv/bin/python bench/bench_growth.py [--sizes 1000000,2000000,5000000,10000000]
        [--objects 20000] [--samples 200] [--batches 6] [--rounds 3] [--plot docs/growth.svg]
        [--db rms_bench_growth] [--span-ops N] [--keep-db]

``--span-ops`` (default: the largest size) sets how many operations the simulated time is
spread over: ``--sizes 1000000 --span-ops 10000000`` builds the first million operations of a
10M run (the same traffic a day), so a database kept at each size can be compared with
EXPLAIN side by side.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import common  # noqa: E402

DB = "rms_bench_growth"  # --db: another name, e.g. one database per size kept with --keep-db
NS = common.BENCH_NAMESPACE
BATCH = 500
INJECTIONS, SIGNALS = 10, 3
OPS_PER_SESSION = 24  # 10 injections, 3 feedback events + 3 effects, 7 automatic UNUSED, 1 session
SPAN = timedelta(days=60)  # simulated time the largest size's traffic is spread over
TARGET_RATIO = 1.20
PAGE = 20  # operations per page in the operations-list measurement


# --- bodies -------------------------------------------------------------------------------------


class Clock:
    """The simulated time of the traffic: every session a fixed step later."""

    def __init__(self, start: datetime, step: timedelta) -> None:
        self.now = start
        self.step = step

    def tick(self) -> datetime:
        self.now += self.step
        return self.now


def session_body(rng: random.Random, ids: list[str], ts: datetime) -> dict:
    injected = rng.sample(ids, INJECTIONS)
    return {
        "session_id": f"conv-{rng.randint(0, 10_000)}",
        "request_id": f"g-{uuid.uuid4()}",
        "namespace_scope": [NS],
        "ts": ts.isoformat(),
        "context_budget": 4096,
        "tokens_used": rng.randint(500, 4000),
        "context_text": "what stack does the customer use",
        "context_tags": [rng.choice(("stack", "billing", "support"))],
        "outcome": rng.choice(("SUCCESS", "PARTIAL", "FAILED")),
        "injections": [
            {
                "object_id": oid,
                "rank_position": i + 1,
                "token_cost": rng.randint(20, 200),
                "composite_score": round(rng.random(), 3),
            }
            for i, oid in enumerate(injected)
        ],
        "signals": [
            {
                "object_id": oid,
                "signal_type": rng.choice(("REFERENCED", "CONFIRMED", "CORRECTED")),
                "actor_id": "analyser",
                "actor_type": "SYSTEM_PROCESS",
            }
            for oid in injected[:SIGNALS]
        ],
    }


def post_batch(api: common.Api, bodies: list[dict]) -> float:
    data = json.dumps(bodies).encode()
    t0 = time.perf_counter()
    status, answer = api.request("POST", "/api/v1/feedback-sessions/batch", data, parse=False)
    seconds = time.perf_counter() - t0
    if status != 207:
        raise RuntimeError(f"batch -> {status}: {answer[:300]!r}")
    results = json.loads(answer)["results"]
    bad = [r for r in results if r["status"] != 201]
    if bad:
        raise RuntimeError(f"batch items refused: {bad[:2]}")
    return seconds


def log_size() -> int:
    """Operations in the log (``seq`` is dense here: nothing is rolled back)."""
    return common.sql("SELECT coalesce(max(seq), 0) FROM rms_operation", db=DB)[0][0]


def grow(api: common.Api, rng, ids, clock: Clock, target: int, vacuum: bool) -> tuple[int, float]:
    """Batches until the log holds ``target`` operations; (operations, seconds). With
    ``vacuum``, :func:`autovacuum` after every chunk of up to 40 batches (≈ 30 s, within
    autovacuum's one-minute naptime at this rate)."""
    api.reconnect()  # the server closed the idle keep-alive connection meanwhile
    ops = log_size()
    t0 = time.perf_counter()
    while ops < target:
        n = max(1, min(40, (target - ops) // (OPS_PER_SESSION * BATCH) + 1))
        for _ in range(n):
            post_batch(api, [session_body(rng, ids, clock.tick()) for _ in range(BATCH)])
        vacuumed = autovacuum() if vacuum else []
        if vacuumed:
            api.reconnect()  # a long VACUUM outlasts the server's keep-alive timeout
        ops = log_size()
        rate = ops / max(1e-9, time.perf_counter() - t0)
        done = f"; vacuumed {', '.join(vacuumed)}" if vacuumed else ""
        print(f"#   {ops:,} operations ({rate:,.0f}/s overall){done}", flush=True)
    return ops, time.perf_counter() - t0


#: Autovacuum's parameters (server settings, overridden by a table's storage parameters).
VACUUM_PARAMETERS = (
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
)


def tables_to_vacuum(stats: Iterable[tuple[str, int, int, int, dict]], server: dict) -> list[str]:
    """The tables of ``stats`` (name, live rows, dead rows, rows inserted since the last vacuum,
    storage parameters) that autovacuum would vacuum now, sorted by name: more dead rows than
    ``threshold + scale_factor * rows``, or more inserted rows than ``insert_threshold +
    insert_scale_factor * rows`` (PostgreSQL docs, "The Autovacuum Daemon"; reltuples there,
    the live-row estimate here), each parameter the table's own if set, else ``server``'s."""
    out = []
    for table, live, dead, inserted, options in stats:
        p = {k: float(options.get(k, server[k])) for k in VACUUM_PARAMETERS}
        dead_limit = p["autovacuum_vacuum_threshold"] + p["autovacuum_vacuum_scale_factor"] * live
        insert_limit = (
            p["autovacuum_vacuum_insert_threshold"]
            + p["autovacuum_vacuum_insert_scale_factor"] * live
        )
        if dead > dead_limit or inserted > insert_limit:
            out.append(table)
    return sorted(out)


def autovacuum() -> list[str]:
    """VACUUM the tables autovacuum would vacuum now; their names.

    The PostgreSQL this bench usually runs on has ``autovacuum = off`` (a CI setting), and a
    deployment has it on. Without it the rows updated on every write (the 20,000 objects and
    their aggregates: one new row version per injection or signal, none of them HOT since
    indexed columns change) leave their dead versions behind for good, and every scan of those
    tables reads a heap and indexes that grow with the log: at 10M operations the aggregates'
    heap was 8x its size at 1M for the same 20,000 live rows (without vacuum). The insert rule sets
    the visibility map of the insert-only tables, which index-only scans need.
    """
    import psycopg

    with psycopg.connect(common.database_url(DB), autocommit=True) as conn:
        names = ", ".join(f"'{k}'" for k in VACUUM_PARAMETERS)
        server = dict(
            conn.execute(f"SELECT name, setting FROM pg_settings WHERE name IN ({names})")
        )
        rows = conn.execute(
            "SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.n_ins_since_vacuum, c.reloptions "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
        ).fetchall()
        stats = [
            (name, live, dead, ins, dict(o.split("=", 1) for o in options or ()))
            for name, live, dead, ins, options in rows
        ]
        tables = tables_to_vacuum(stats, server)
        for table in tables:
            conn.execute(f'VACUUM "{table}"')
    return tables


def table_pages() -> dict[str, int]:
    """Heap pages of the tables every overview render scans whole (their live rows do not grow
    with the log)."""
    rows = common.sql(
        "SELECT relname, pg_relation_size(oid) / 8192 FROM pg_class WHERE relname IN "
        "('feedback_feedbackaggregate', 'rms_memoryobject')",
        db=DB,
    )
    return dict(rows)


def _admin_sql(statement: str) -> None:
    import psycopg

    with psycopg.connect(common.database_url("postgres"), autocommit=True) as conn:
        conn.execute(statement)


def setup_database() -> None:
    """A fresh, migrated ``DB`` (its name checked in main: rms_bench* or rms_growth*)."""
    common.BENCH_VAR_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    _admin_sql(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    _admin_sql(f'CREATE DATABASE "{DB}"')
    common.manage("migrate", "--noinput", db=DB)
    print(f"# database {DB}: recreated and migrated in {time.perf_counter() - t0:.1f} s")


def drop_database() -> None:
    _admin_sql(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


def analyze() -> None:
    import psycopg

    with psycopg.connect(common.database_url(DB), autocommit=True) as conn:
        conn.execute("ANALYZE")


# --- measurements over HTTP ---------------------------------------------------------------------


def timed_get(api: common.Api, path: str) -> float:
    t0 = time.perf_counter()
    status, body = api.request("GET", path, parse=False)
    seconds = time.perf_counter() - t0
    if status != 200:
        raise RuntimeError(f"GET {path} -> {status}: {body[:300]!r}")
    return seconds * 1000


def p(values: list[float], q: float) -> float:
    return common.percentile(sorted(values), q)


def measure_http(api, op_api, rng, ids, clock: Clock, args) -> dict:
    out: dict[str, float] = {}
    api.reconnect()
    op_api.reconnect()
    # batch ingestion (after one warm-up batch)
    post_batch(api, [session_body(rng, ids, clock.tick()) for _ in range(BATCH)])
    walls = [
        post_batch(api, [session_body(rng, ids, clock.tick()) for _ in range(BATCH)])
        for _ in range(args.batches)
    ]
    out["batch ingestion, events/s"] = BATCH * (INJECTIONS + SIGNALS) * len(walls) / sum(walls)
    # single sessions
    times = []
    for _ in range(args.samples):
        data = json.dumps(session_body(rng, ids, clock.tick())).encode()
        t0 = time.perf_counter()
        status, body = api.request("POST", "/api/v1/feedback-sessions", data, parse=False)
        times.append((time.perf_counter() - t0) * 1000)
        if status != 201:
            raise RuntimeError(f"session -> {status}: {body[:300]!r}")
    out["single session p50, ms"] = p(times, 50)
    out["single session p95, ms"] = p(times, 95)
    # state as of a random time of the history
    start = clock.start
    span = (clock.now - start).total_seconds()
    times = []
    for _ in range(args.samples):
        at = start + timedelta(seconds=rng.uniform(0, span))
        q = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        times.append(timed_get(op_api, f"/api/v1/objects/{rng.choice(ids)}/state?as_of={q}"))
    out["state?as_of p50, ms"] = p(times, 50)
    out["state?as_of p95, ms"] = p(times, 95)
    # an object's operations: the first page and the last, of PAGE operations each (full at
    # every size, so the figures compare pages of the same size)
    first, last = [], []
    for oid in rng.sample(ids, min(len(ids), args.samples)):
        path = f"/api/v1/objects/{oid}/operations"
        first.append(timed_get(op_api, f"{path}?page_size={PAGE}"))
        # The last page's cursor is the API's own encoding of the operation before the last
        # PAGE ones, read from the database: fetching every earlier page through the API first
        # would put a response of the whole chain (10x longer at 10M) just before the timed
        # request, whose cost could spill into it.
        seq, ts = common.sql(
            "SELECT seq, ts FROM rms_operation WHERE target_id = %s "
            "ORDER BY ts DESC, seq DESC OFFSET %s LIMIT 1",
            (oid, PAGE),
            db=DB,
        )[0]
        cursor = page_cursor(seq, ts)
        last.append(timed_get(op_api, f"{path}?cursor={cursor}&page_size={PAGE}"))
    out["operations list, first page p95, ms"] = p(first, 95)
    out["operations list, last page p95, ms"] = p(last, 95)
    # feed pages from random positions of the whole log
    cursors = feed_cursors(rng, max(20, args.samples // 5))
    times = [timed_get(op_api, f"/api/v1/changes?after={c}&limit=1000") for c in cursors]
    out["feed page (1,000) p50, ms"] = p(times, 50)
    out["feed page (1,000) p95, ms"] = p(times, 95)
    return out


def page_cursor(seq: int, ts: datetime) -> str:
    """A list page's cursor as the API writes it (``rms.api.pagination.encode_cursor`` of
    ``[seq, ts]``; ``tests/bench`` pins the two together): this process has no Django."""
    raw = json.dumps([seq, ts.astimezone(UTC).isoformat()]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def feed_cursors(rng, n: int) -> list[str]:
    """Cursors of change rows at random places of the log (the feed's own encoding)."""
    from rms import events

    top = common.sql("SELECT max(seq) FROM rms_operation", db=DB)[0][0]
    picks = sorted(rng.randint(1, top) for _ in range(n))
    rows = common.sql(
        "SELECT DISTINCT ON (p) p, o.txid::text, o.seq FROM unnest(%s::bigint[]) AS p "
        "JOIN LATERAL (SELECT txid, seq FROM rms_operation WHERE seq >= p ORDER BY seq LIMIT 1) o "
        "ON true",
        (picks,),
        db=DB,
    )
    return [events.encode_cursor(events.Position(int(t), int(s))) for _, t, s in rows]


# --- measurements in a child process (the simulated clock) --------------------------------------


def child(what: str, now_iso: str, runs: int) -> None:
    now = datetime.fromisoformat(now_iso)
    common.django_setup(DB)
    from django.utils import timezone

    timezone.now = lambda: now  # the dashboard's windows end at the simulated now
    if what == "overview":
        print(json.dumps(overview_child(runs)))
    else:
        print(json.dumps(sweep_child(now)))


def overview_child(runs: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(
        username="growth-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    c = Client()
    c.force_login(user)
    out = {}
    for label, path in (("24h", f"/?namespace={NS}"), ("7d", f"/?namespace={NS}&window=7d")):
        cache.clear()
        assert c.get(path).status_code == 200, path
        times = []
        for _ in range(runs):
            cache.clear()
            t0 = time.perf_counter()
            response = c.get(path)
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, path
        out[f"overview {label} cold p95, ms"] = p(times, 95)
    return out


def sweep_child(now: datetime) -> dict:
    from django.db import connection

    from feedback import sweep

    connection.ensure_connection()
    checks0 = common.sql(
        "SELECT count(*) FROM rms_operation WHERE op_type = 'IGNORED_CHECK'", db=DB
    )[0][0]
    with common.CpuMeter(None, DB) as cpu:
        result = sweep.sweep(now=now)
    checks = (
        common.sql("SELECT count(*) FROM rms_operation WHERE op_type = 'IGNORED_CHECK'", db=DB)[0][
            0
        ]
        - checks0
    )
    decisions = result["examined"]
    if checks != decisions:
        raise RuntimeError(f"{decisions} decisions but {checks} IGNORED_CHECK operations")
    return {
        "sweep decisions": decisions,
        "sweep CPU per decision, µs": (cpu.client + cpu.postgres) * 1e6 / max(1, decisions),
        "sweep wall per decision, µs": cpu.wall * 1e6 / max(1, decisions),
    }


def in_child(what: str, now: datetime, runs: int) -> dict:
    args = ["--child", what, "--now", now.isoformat(), "--runs", str(runs), "--db", DB]
    return common.run_child(__file__, *args, db=DB)


# --- the plot -----------------------------------------------------------------------------------


def svg_plot(path: Path, sizes: list[int], table: dict[str, list[float]]) -> None:
    """Each figure relative to its first size (1.0 = unchanged), on a log x axis of sizes."""
    import math

    w, h, left, right, top, bottom = 760, 420, 60, 250, 30, 50
    lo_x, hi_x = math.log10(sizes[0]), math.log10(sizes[-1])
    ratios = {k: [v / vals[0] if vals[0] else 1.0 for v in vals] for k, vals in table.items()}
    hi_y = max(1.5, max(max(r) for r in ratios.values()) * 1.05)

    def x(size):
        return left + (math.log10(size) - lo_x) / max(1e-9, hi_x - lo_x) * (w - left - right)

    def y(ratio):
        return top + (1 - ratio / hi_y) * (h - top - bottom)

    colours = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
        "#393b79",
        "#637939",
        "#8c6d31",
        "#843c39",
    ]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13">Cost at each log size relative to the first '
        f"(1.0 = flat; dashed: the 20 % limit)</text>",
    ]
    for ratio in (0.5, 1.0, 1.5, 2.0, 3.0):
        if ratio <= hi_y:
            parts.append(
                f'<line x1="{left}" x2="{w - right}" y1="{y(ratio):.1f}" y2="{y(ratio):.1f}" '
                'stroke="#ddd"/>'
                f'<text x="{left - 8}" y="{y(ratio) + 4:.1f}" text-anchor="end">{ratio:.1f}×</text>'
            )
    parts.append(
        f'<line x1="{left}" x2="{w - right}" y1="{y(TARGET_RATIO):.1f}" '
        f'y2="{y(TARGET_RATIO):.1f}" stroke="#999" stroke-dasharray="4 3"/>'
    )
    for size in sizes:
        label = f"{size / 1e6:.0f}M" if size >= 1e6 else f"{size / 1e3:.0f}k"
        parts.append(
            f'<text x="{x(size):.1f}" y="{h - bottom + 18}" text-anchor="middle">{label}</text>'
        )
    parts.append(
        f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">'
        "operations in the log</text>"
    )
    for i, (name, r) in enumerate(ratios.items()):
        colour = colours[i % len(colours)]
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in zip(sizes, r, strict=True))
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        ly = top + 10 + i * 16
        parts.append(
            f'<line x1="{w - right + 12}" x2="{w - right + 30}" y1="{ly}" y2="{ly}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<text x="{w - right + 34}" y="{ly + 4}">{name}</text>'
        )
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    global DB
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,2000000,5000000,10000000")
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--runs", type=int, default=10, help="overview renders per window")
    parser.add_argument("--rounds", type=int, default=3, help="measurement rounds per size")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "growth.svg")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="do not vacuum as autovacuum would (the server's autovacuum setting alone decides)",
    )
    parser.add_argument("--db", default=DB, help="database name: rms_bench* or rms_growth*")
    parser.add_argument("--span-ops", type=int, help="operations the simulated time is spread "
                        "over (default: the largest size)")  # fmt: skip
    parser.add_argument("--from-log", type=Path, help="only redo the table and plot of a run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--now", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.db.startswith(("rms_bench", "rms_growth")) or not args.db.isidentifier():
        parser.error("--db: a benchmark database, rms_bench* or rms_growth*")
    DB = args.db
    if args.child:
        child(args.child, args.now, args.runs)
        return 0
    if args.from_log:
        from_log(args.from_log, args.plot)
        return 0

    sizes = sorted(int(s) for s in args.sizes.split(","))
    rng = random.Random(args.seed)
    # The largest size's sessions, plus the measurements', spread over SPAN ending before now.
    per_round = BATCH * (args.batches + 1) + args.samples
    span_ops = args.span_ops or sizes[-1]
    sessions = span_ops // OPS_PER_SESSION + len(sizes) * args.rounds * per_round
    start = datetime.now(UTC).replace(microsecond=0) - SPAN - timedelta(days=2)
    clock = Clock(start, SPAN / sessions)
    clock.start = start
    setup_database()
    columns: dict[str, list[float]] = {}
    built: list[tuple[int, float]] = []
    try:
        token = common.create_api_client("growth-writer", db=DB)
        reader = common.create_api_client("growth-operator", role="operator", db=DB)
        with common.Server(db=DB, workers=2, threads=4) as server:
            api = common.Api(server.port, token, timeout=300)
            op_api = common.Api(server.port, reader, timeout=60)
            ids: list[str] = []
            for first in range(0, args.objects, 1000):
                body = [
                    {"namespace": NS, "content": f"growth fact {i} about the customer's stack",
                     "epistemic_type": rng.choice(("OBSERVED", "ASSERTED", "INFERRED")),
                     "domain_tags": [rng.choice(("stack", "billing", "support"))],
                     "ts": start.isoformat()}
                    for i in range(first, min(args.objects, first + 1000))
                ]  # fmt: skip
                status, answer = api.request("POST", "/api/v1/objects", body)
                if status != 201:
                    raise RuntimeError(f"objects -> {status}: {answer}")
                ids += [o["id"] for o in answer]
            print(f"# {len(ids):,} objects; growing to {', '.join(f'{s:,}' for s in sizes)}")
            for size in sizes:
                ops, seconds = grow(api, rng, ids, clock, size, not args.no_vacuum)
                built.append((ops, seconds))
                analyze()
                print(f"# heap pages: {json.dumps(table_pages())}", flush=True)
                # best of --rounds: this VM is shared, and a round that other work slowed
                # down says nothing about the log's size
                rounds = [measure_http(api, op_api, rng, ids, clock, args)]
                rounds[0].update(in_child("overview", clock.now, args.runs))
                for _ in range(args.rounds - 1):
                    if not args.no_vacuum:
                        autovacuum()  # the rounds' own traffic updates the same rows
                    rounds.append(measure_http(api, op_api, rng, ids, clock, args))
                    rounds[-1].update(in_child("overview", clock.now, args.runs))
                figures = {
                    name: (max if name.endswith("/s") else min)(r[name] for r in rounds)
                    for name in rounds[0]
                }
                figures.update(in_child("sweep", clock.tick(), args.runs))
                print(f"# at {ops:,} operations: {json.dumps(figures)}", flush=True)
                for name, value in figures.items():
                    columns.setdefault(name, []).append(value)
            api.close()
            op_api.close()
    finally:
        if not args.keep_db:
            drop_database()

    report(built, columns, args.plot)
    return 0


#: The figures drawn on the plot: the tail latencies and the per-item costs.
PLOTTED = (
    "single session p95, ms",
    "state?as_of p95, ms",
    "operations list, first page p95, ms",
    "operations list, last page p95, ms",
    "feed page (1,000) p95, ms",
    "overview 24h cold p95, ms",
    "overview 7d cold p95, ms",
    "sweep CPU per decision, µs",
)


def report(built: list[tuple[int, float]], columns: dict[str, list[float]], plot: Path) -> None:
    headers = ["figure", *[f"{ops / 1e6:.1f}M ops" for ops, _ in built], "last / first"]
    rows = []
    for name, values in columns.items():
        fmt = "{:,.0f}" if max(values) >= 100 else "{:.1f}"
        ratio = values[-1] / values[0] if values[0] else float("nan")
        rows.append([name, *[fmt.format(v) for v in values], f"{ratio:.2f}"])
    common.print_table(headers, rows)
    if any(s for _, s in built):
        print("# growth: " + ", ".join(f"to {o:,} ops in {s:.0f} s" for o, s in built))
    plotted = {k: columns[k] for k in PLOTTED if k in columns}
    # Throughput falls when cost rises: plot its inverse so every line reads "cost".
    key = "batch ingestion, events/s"
    if key in columns:
        plotted["batch ingestion, time per event"] = [1 / v for v in columns[key]]
    if len(built) > 1:
        svg_plot(plot, [o for o, _ in built], plotted)
        print(f"# plot: {plot}")


def from_log(path: Path, plot: Path) -> None:
    """The table and plot again from a run's output (its ``# at N operations: {...}`` lines)."""
    built, columns = [], {}
    for line in path.read_text().splitlines():
        if line.startswith("# at ") and " operations: " in line:
            head, figures = line.split(" operations: ", 1)
            built.append((int(head[len("# at ") :].replace(",", "")), 0.0))
            for name, value in json.loads(figures).items():
                columns.setdefault(name, []).append(value)
    report(built, columns, plot)


if __name__ == "__main__":
    sys.exit(main())
