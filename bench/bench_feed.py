"""The closed loop's read side: change-feed throughput on a large log, and the latency from a
commit to the feed (long poll) and to a webhook receiver.

    .venv/bin/python bench/bench_feed.py [--events 1000000] [--rate 200] [--seconds 20]
        [--db rms_bench_feed] [--redis redis://127.0.0.1:6379/9]

1. **Feed throughput.** A log of ``--events`` change operations (REINFORCE rows with realistic
   payloads and states, three namespaces, written by the bulk loader below in transactions of
   10,000 rows, each with its own transaction id) is read through HTTP by following
   ``next_cursor`` in pages of 1,000 from the start, parsing every page as a consumer would.
   Beside it, one ordered ``COPY`` of the same rows in feed order is the floor.
2. **Latency.** Writers post feedback sessions, each with five CONFIRMED signals (five
   REINFORCE operations: five change events), ``--rate`` events per second in all. A
   long-polling consumer (``wait=30``) and a webhook receiver
   (a local HTTP server; the dispatcher is a real Celery worker driven by a real beat at its
   default 1 s period) note when each event arrives. Latency is measured from the moment the
   writer *sent* the request, an upper bound of the time its transaction committed.

Prints the tables of docs/PERFORMANCE.md. Targets: feed ≥ 20,000 events/s; p95 commit → feed
≤ 1 s and commit → receiver ≤ 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_feed"
REDIS = "redis://127.0.0.1:6379/9"
PAGE = 1000
SIGNALS_PER_SESSION = 5
CHUNK = 10_000
NAMESPACES = ("bench", "bench_b", "bench_c")
FEED_TARGET = 20_000
FEED_P95_TARGET = 1.0
HOOK_P95_TARGET = 2.0

_BULK_SQL = """
INSERT INTO rms_operation
  (id, ts, op_type, target_type, target_id, namespace, actor_id, actor_type, session_id,
   payload, policy_version, state, prev_hash, hash)
SELECT gen_random_uuid(), now() - interval '30 days' + (g * interval '1 ms'), 'REINFORCE',
       'memory_object', gen_random_uuid(), (%(namespaces)s::text[])[1 + g %% 3], 'user-7',
       'HUMAN_USER', 'conv-' || (g %% 5000),
       jsonb_build_object('signal_type', 'CONFIRMED', 'gamma', 0.15,
         'gamma_effective', 0.15, 'confidence_before', 0.75, 'confidence_after', 0.7875,
         'salience_before', 0.5, 'salience_after', 0.5375, 'session_id', 'conv-' || (g %% 5000),
         'session_gamma_total', 0.15, 'signal_source', 'HUMAN_USER',
         'detection_method', 'explicit_user', 'reliability_class', 'HIGH',
         'reliability_discount', 1.0, 'repeat_index', 1, 'cap_applied', false,
         'ceiling_applied', false, 'provenance_missing', false, 'evidence_ids', '[]'::jsonb,
         'policy_version', 'confidence_v1', 'correlation_discount_applied', false),
       'confidence_v1',
       jsonb_build_object('epistemic_type', 'ASSERTED', 'decay_profile', 'MEDIUM',
         'confidence', 0.7875, 'salience_base', 0.5375, 'condition_state', null,
         'reinforcement_boost', 0.0, 'reinforcement_count', 1 + g %% 40,
         'last_reinforced_at', '2026-11-01T00:00:00.000000+00:00', 'pinned', false,
         'evidence_ids', '[]'::jsonb, 'version', 2 + g %% 90),
       decode(repeat('0', 64), 'hex'), decode(md5(g::text) || md5(g::text), 'hex')
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
"""


def build_log(events: int) -> float:
    """The bulk loader: ``events`` change operations, CHUNK per transaction."""
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(common.database_url(DB)) as conn:
        for start in range(0, events, CHUNK):
            stop = min(events, start + CHUNK) - 1
            conn.execute(_BULK_SQL, {"namespaces": list(NAMESPACES), "start": start, "stop": stop})
            conn.commit()
        conn.execute("ANALYZE rms_operation")
        conn.commit()
    return time.perf_counter() - t0


def copy_floor() -> tuple[float, int, int]:
    """One ordered COPY of the feed's rows and columns: (seconds, rows, bytes)."""
    import psycopg

    query = (
        "COPY (SELECT seq, txid, id, ts, op_type, target_type, target_id, namespace, payload, "
        "state FROM rms_operation ORDER BY txid, seq) TO STDOUT"
    )
    with psycopg.connect(common.database_url(DB)) as conn, conn.cursor() as cur:
        t0 = time.perf_counter()
        size = rows = 0
        with cur.copy(query) as copy:
            for chunk in copy:
                size += len(chunk)
                rows += bytes(chunk).count(b"\n")
        return time.perf_counter() - t0, rows, size


def read_feed(port: int, token: str) -> tuple[float, int, int]:
    """Follow the whole feed in pages of PAGE: (seconds, events, pages)."""
    api = common.Api(port, token, timeout=120)
    after = ""
    events = pages = 0
    t0 = time.perf_counter()
    while True:
        query = f"/api/v1/changes?limit={PAGE}" + (f"&after={after}" if after else "")
        status, body = api.request("GET", query)
        if status != 200:
            raise RuntimeError(f"feed answered {status}: {body}")
        events += len(body["results"])
        pages += 1
        after = body["next_cursor"]
        if not body["has_more"]:
            break
    elapsed = time.perf_counter() - t0
    api.close()
    return elapsed, events, pages


# --- latency -------------------------------------------------------------------------------------


class Celery:
    """A real worker and a real beat (default dispatch period), as subprocesses."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.procs: list[subprocess.Popen] = []
        self.logs = []

    def __enter__(self) -> Celery:
        common.BENCH_VAR_DIR.mkdir(parents=True, exist_ok=True)
        for role, args in (
            ("worker", ["worker", "-l", "warning", "--concurrency", "2"]),
            ("beat", ["beat", "-l", "warning", "-s", str(common.BENCH_VAR_DIR / "beat-feed")]),
        ):
            log = open(common.BENCH_VAR_DIR / f"celery-{role}.log", "w")  # noqa: SIM115
            self.logs.append(log)
            self.procs.append(
                subprocess.Popen(
                    [common.PYTHON, "-m", "celery", "-A", "rms", *args],
                    cwd=common.ROOT,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self.logs:
            log.close()


def _key(event: dict) -> tuple:
    """An event's identity as the writer knows it: (object, session)."""
    return event.get("target_id"), (event.get("data") or {}).get("session_id")


def receiver(arrivals: dict) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a production receiver would

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            arrivals.setdefault(_key(json.loads(body)), time.perf_counter())
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((common.HOST, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def measure_latency(port, client_token, operator_token, admin_token, rate, seconds, objects):
    hook_arrivals: dict[str, float] = {}
    feed_arrivals: dict[str, float] = {}
    sent: dict[str, float] = {}
    hook = receiver(hook_arrivals)
    admin = common.Api(port, admin_token)
    status, body = admin.request(
        "POST", "/api/v1/webhooks", {"url": f"http://127.0.0.1:{hook.server_address[1]}/hook"}
    )
    if status != 201:
        raise RuntimeError(f"webhook registration answered {status}: {body}")
    status, head = common.Api(port, operator_token).request("GET", "/api/v1/changes?limit=1000")
    cursor = head["next_cursor"]
    while head["has_more"]:
        status, head = common.Api(port, operator_token).request(
            "GET", f"/api/v1/changes?limit=1000&after={cursor}"
        )
        cursor = head["next_cursor"]
    stop = threading.Event()

    def consume():
        api = common.Api(port, operator_token, timeout=60)
        nonlocal cursor
        while not stop.is_set():
            try:
                status, page = api.request(
                    "GET", f"/api/v1/changes?wait=30&limit=1000&after={cursor}"
                )
            except OSError:  # the server stopping under a long poll at the end of the run
                if stop.is_set():
                    return
                raise
            now = time.perf_counter()
            for event in page["results"]:
                feed_arrivals.setdefault(_key(event), now)
            cursor = page["next_cursor"]

    threads = 4
    per_request = SIGNALS_PER_SESSION
    per_thread = rate / per_request / threads  # sessions per second per writer

    def write(n: int):
        api = common.Api(port, client_token)
        t_start = time.perf_counter()
        i = 0
        while time.perf_counter() - t_start < seconds:
            due = t_start + i / per_thread
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            session_id = f"w{n}-{i}"
            oids = [objects[(n * 7919 + i * per_request + k) % len(objects)]
                    for k in range(per_request)]  # fmt: skip
            body = {
                "session_id": session_id, "request_id": session_id,
                "namespace_scope": ["bench"], "context_budget": 4000, "tokens_used": 400,
                "injections": [{"object_id": o, "token_cost": 40, "rank_position": r + 1}
                               for r, o in enumerate(oids)],
                "signals": [{"object_id": o, "signal_type": "CONFIRMED", "actor_id": f"u{n}",
                             "actor_type": "HUMAN_USER"} for o in oids],
            }  # fmt: skip
            t0 = time.perf_counter()
            status, _ = api.request("POST", "/api/v1/feedback-sessions", body)
            if status == 201:
                for o in oids:  # one REINFORCE (one change event) per signal
                    sent[(o, session_id)] = t0
            i += 1

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    time.sleep(0.5)
    writers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline and (
        len(set(sent) - set(hook_arrivals)) or len(set(sent) - set(feed_arrivals))
    ):
        time.sleep(0.2)
    stop.set()
    hook.shutdown()
    feed_lat = sorted(feed_arrivals[k] - sent[k] for k in sent if k in feed_arrivals)
    hook_lat = sorted(hook_arrivals[k] - sent[k] for k in sent if k in hook_arrivals)
    sending = max(sent.values()) - min(sent.values()) if sent else 0.0
    arrived = sorted(hook_arrivals.values())
    span = arrived[-1] - arrived[0] if len(arrived) > 1 else 0.0
    rates = (len(sent) / sending if sending else 0.0, len(arrived) / span if span else 0.0)
    return len(sent), feed_lat, hook_lat, rates


def measure_drain(port: int, admin_token: str, events: int, env: dict) -> tuple[int, float]:
    """The dispatcher's ceiling: a backlog of ``events`` change events (the bulk loader) behind a
    registered endpoint, worked off by a real worker and beat with nothing else running:
    (events arrived, deliveries per second from the first arrival to the last)."""
    arrivals: dict = {}
    hook = receiver(arrivals)
    status, body = common.Api(port, admin_token).request(
        "POST", "/api/v1/webhooks", {"url": f"http://127.0.0.1:{hook.server_address[1]}/hook"}
    )
    if status != 201:
        raise RuntimeError(f"webhook registration answered {status}: {body}")
    build_log(events)
    with Celery(env):
        deadline = time.perf_counter() + 60 + events / 50
        while len(arrivals) < events and time.perf_counter() < deadline:
            time.sleep(0.2)
    hook.shutdown()
    times = sorted(arrivals.values())
    return len(times), (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def make_objects(port: int, token: str, n: int) -> list[str]:
    api = common.Api(port, token)
    ids = []
    for start in range(0, n, 500):
        items = [
            {"namespace": "bench", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
            for i in range(start, min(n, start + 500))
        ]
        status, body = api.request("POST", "/api/v1/objects", items)
        if status != 201:
            raise RuntimeError(f"objects answered {status}: {body}")
        ids += [o["id"] for o in body]
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument(
        "--drain", type=int, default=0, help="also time the dispatcher on a backlog of N events"
    )
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the server and the worker"
    )
    parser.add_argument(
        "--db", default=DB, help="the scratch database (rms_bench*), recreated and dropped"
    )
    parser.add_argument(
        "--redis", default=REDIS, help="the Redis database of the latency and drain parts"
    )
    args = parser.parse_args(argv)
    globals().update(DB=args.db, REDIS=args.redis)
    common.stop_on_sigterm()
    ok = True
    common.setup_database(DB)
    admin = common.create_api_client("feed-admin", role="admin", namespaces=NAMESPACES, db=DB)
    operator = common.create_api_client("feed-operator", role="operator", namespaces=(), db=DB)
    writer = common.create_api_client("feed-writer", namespaces=NAMESPACES, db=DB)
    extra = {"RMS_WEBHOOKS_ALLOW_PRIVATE": "1", **dict(kv.split("=", 1) for kv in args.env)}
    try:
        if not args.skip_throughput:
            built = build_log(args.events)
            print(f"# log: {args.events:,} change operations loaded in {built:.1f} s")
            floor, rows, size = copy_floor()
            with common.Server(db=DB, extra_env=extra) as server:
                read_feed(server.port, operator)  # warm the caches once
                elapsed, events, pages = read_feed(server.port, operator)
            rate = events / elapsed
            common.print_table(
                ["what", "rows", "seconds", "events/s", "vs COPY", "target"],
                [
                    ["ordered COPY (floor)", f"{rows:,}", f"{floor:.2f}", f"{rows / floor:,.0f}",
                     "1.00", ""],
                    [f"GET /changes, pages of {PAGE} ({pages} pages)", f"{events:,}",
                     f"{elapsed:.2f}", f"{rate:,.0f}", f"{floor / elapsed:.2f}",
                     f">= {FEED_TARGET:,}/s"],
                ],
            )  # fmt: skip
            print(f"# COPY bytes: {size / 1e6:.0f} MB")
            if events != args.events:
                print(f"FAILED: the feed returned {events:,} of {args.events:,} events")
                ok = False
            ok = ok and rate >= FEED_TARGET
        if not args.skip_latency:
            env = common.bench_env(DB, redis_url=REDIS, **extra)
            with common.Server(db=DB, redis_url=REDIS, extra_env=extra) as server, Celery(env):
                objects = make_objects(server.port, writer, 2000)
                time.sleep(3)  # worker and beat up
                n, feed_lat, hook_lat, (sent_rate, hook_rate) = measure_latency(
                    server.port, writer, operator, admin, args.rate, args.seconds, objects
                )
            rows = []
            for label, lat, target in (
                ("commit → feed (long poll)", feed_lat, FEED_P95_TARGET),
                ("commit → webhook receiver", hook_lat, HOOK_P95_TARGET),
            ):
                pct = common.percentiles(lat) if lat else {50: float("nan"), 95: float("nan"),
                                                           99: float("nan")}  # fmt: skip
                rows.append([label, f"{len(lat):,} / {n:,}", f"{pct[50]:.3f}", f"{pct[95]:.3f}",
                             f"{pct[99]:.3f}", f"{max(lat) if lat else float('nan'):.3f}",
                             f"p95 <= {target:g} s"])  # fmt: skip
                ok = ok and len(lat) == n and pct[95] <= target
            print(
                f"# load: {args.rate:g} change events/s for {args.seconds:g} s: 4 writer threads "
                f"posting feedback sessions of {SIGNALS_PER_SESSION} CONFIRMED signals"
            )
            common.print_table(
                ["latency", "arrived", "p50 s", "p95 s", "p99 s", "max s", "target"], rows
            )
            print(
                f"# events committed {sent_rate:.0f}/s; webhook deliveries {hook_rate:.0f}/s "
                "(first to last arrival at the receiver)"
            )
        if args.drain:
            common.setup_database(DB)  # a fresh log: the backlog is all there is to deliver
            admin = common.create_api_client(
                "feed-admin", role="admin", namespaces=NAMESPACES, db=DB
            )
            env = common.bench_env(DB, redis_url=REDIS, **extra)
            with common.Server(db=DB, redis_url=REDIS, extra_env=extra) as server:
                arrived, rate = measure_drain(server.port, admin, args.drain, env)
            print(
                f"# drain: {arrived:,} / {args.drain:,} backlog events delivered, "
                f"{rate:,.0f} deliveries/s (one endpoint, nothing else running)"
            )
            ok = ok and arrived == args.drain
    finally:
        if not os.environ.get("RMS_BENCH_KEEP_DB"):
            common.drop_database(DB)
    print("bench_feed:", "OK" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
