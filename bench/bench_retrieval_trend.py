"""The dashboard's retrieval trends on PostgreSQL: the per-day form
(``feedback.selectors.retrieval_rows_daily`` + the pure evaluation) over the last 7, 14, 30 and
90 days, then the same read from the retrieval rollup with the hour running live
(``feedback.retrieval_rollup``, after its first run), and the pages that read it —
``/retrieval/`` and the overview — cold (cache cleared) and warm, through Django's test client.

Data as ``bench_explain``'s retrieval part (bulk-inserted sessions one minute apart, ``--per-
session`` ranked injections each, used signals on a third): in a fresh ``rms_bench_trend``
database, dropped at the end (``--reuse`` keeps it and reuses it when it is already built, so
the pages can be profiled again; ``--db`` names another ``rms_bench*`` database). "Now" is the
last session's time.

    .venv/bin/python bench/bench_retrieval_trend.py [--objects 100000] [--sessions 100000]
        [--per-session 10] [--repeat 10] [--reuse] [--db rms_bench_trend]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_explain  # noqa: E402
import common  # noqa: E402

DB = "rms_bench_trend"


def _built(db: str) -> bool:
    """Whether ``db`` exists and holds a built data set (``--reuse``)."""
    try:
        return bool(common.sql("SELECT count(*) FROM rms_namespace", db=db)[0][0])
    except Exception:  # noqa: BLE001 - missing database or tables: build it
        return False


def run(args) -> None:
    print(f"# load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    reuse = args.reuse and _built(args.db)
    if not reuse:
        common.setup_database(args.db)
    common.django_setup(args.db)
    import time_machine
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client

    from feedback import retrieval_quality, retrieval_rollup
    from feedback.selectors import retrieval_rows_daily
    from rms.models import ApiClient, Namespace

    rng = random.Random(args.seed)
    if reuse:
        ns = Namespace.objects.get(name=common.BENCH_NAMESPACE)
        user = get_user_model().objects.get(username="bench")
        print(f"# reusing {args.db}")
    else:
        ns = Namespace.objects.create(name=common.BENCH_NAMESPACE)
        user = get_user_model().objects.create(username="bench")
        client = ApiClient.objects.create(user=user, name="bench", role="admin", token_hash="-")
        t0 = time.perf_counter()
        n_inj = bench_explain.build_injections(client, ns, args, rng)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(f"# {args.objects} objects, {n_inj} injections in {time.perf_counter() - t0:.1f} s")
    now = bench_explain.EPOCH + timedelta(minutes=args.sessions)
    rows = []
    from feedback.selectors import retrieval_rows

    def window_form():
        retrieval_quality.evaluate(*retrieval_rows(ns, now - timedelta(days=7), now))

    cold, p, c = bench_explain.timed(window_form, args.repeat)
    rows.append(["one-window form, live, last 7 days", cold, p[50], p[95], c[50], c[95]])
    for days in (7, 14, 30, 90):
        since = now - timedelta(days=days)

        def daily(since=since):
            retrieval_quality.evaluate_daily(retrieval_rows_daily(ns, since, now))

        cold, p, c = bench_explain.timed(daily, args.repeat)
        rows.append([f"per-day form, last {days} days", cold, p[50], p[95], c[50], c[95]])
    # The rollup's first run (every day and hour up to the hour running at "now"), then a rerun.
    t0 = time.perf_counter()
    written = retrieval_rollup.rollup_all(now)["rows"]
    print(f"# rollup, first run: {written} rows in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    retrieval_rollup.rollup_all(now)
    print(f"# rollup, rerun with nothing new: {(time.perf_counter() - t0) * 1000:.1f} ms")
    for days in (7, 14, 30, 90):
        since = now - timedelta(days=days)
        since = since.replace(hour=0, minute=0, second=0, microsecond=0)

        def rolled(since=since):
            retrieval_quality.evaluate_daily(retrieval_rollup.retrieval_days(ns, since, now))

        cold, p, c = bench_explain.timed(rolled, args.repeat)
        rows.append([f"rollup + live tail, last {days} days", cold, p[50], p[95], c[50], c[95]])
    from feedback.selectors import namespace_retrieval_quality

    def api_form():
        namespace_retrieval_quality(ns, now - timedelta(days=7), now)

    # /retrieval-quality's answer: the same rollup + live tail, added up (its partial first day
    # is computed live too).
    cold, p, c = bench_explain.timed(api_form, args.repeat)
    rows.append(["/retrieval-quality's form, last 7 days", cold, p[50], p[95], c[50], c[95]])
    cold, p, c = bench_explain.timed(lambda: namespace_retrieval_quality(ns), args.repeat)
    rows.append(["/retrieval-quality's form, unwindowed", cold, p[50], p[95], c[50], c[95]])
    # The pages below read the rollup.
    http = Client()
    http.force_login(user)
    with time_machine.travel(now, tick=False):
        for label, path in (
            ("/retrieval/ (14 days), cache cleared", f"/retrieval/?namespace={ns.name}"),
            ("overview (7-day card), cache cleared", f"/?namespace={ns.name}"),
        ):

            def page(path=path):
                cache.clear()
                resp = http.get(path)
                assert resp.status_code == 200, resp.content[:300]

            cold, p, c = bench_explain.timed(page, args.repeat)
            rows.append([label, cold, p[50], p[95], c[50], c[95]])

        def warm():
            resp = http.get(f"/?namespace={ns.name}")
            assert resp.status_code == 200

        cold, p, c = bench_explain.timed(warm, args.repeat)
        rows.append(["overview, cached", cold, p[50], p[95], c[50], c[95]])
    common.print_table(
        ["operation", "cold ms", "p50 ms", "p95 ms", "CPU p50", "CPU p95"],
        [[r[0], *(f"{v:.1f}" for v in r[1:])] for r in rows],
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep the database, reuse it if built")
    parser.add_argument("--db", default=DB, help="scratch database (rms_bench*)")
    args = parser.parse_args()
    if not (args.db.startswith("rms_bench") and args.db.replace("_", "").isalnum()):
        parser.error("--db: benchmark databases are rms_bench*")
    common.stop_on_sigterm()
    try:
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.reuse:
            common.drop_database(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
