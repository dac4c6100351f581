"""A retention pass over a large log (PostgreSQL): how long it takes and what it leaves.

A scratch database (``rms_bench_retention``) is grown through the batch endpoint of a real
server to about ``--ops`` operations (``bench_ingest``'s sessions: 24 operations each) with
session times spread over ``--days`` days, so that a retention period of half of them cuts
about half the log. Then, in this process, one retention pass (``feedback.retention``) moves
what is older to a Parquet archive in a temporary folder, timed; then ``verify_archive`` and
``verify_chain`` run on the result, and the database's size is measured before and after
(``pg_database_size`` after ``VACUUM FULL``).

    .venv/bin/python bench/bench_retention.py [--ops 1000000] [--objects 5000] [--keep-db]
        [--db rms_bench_x] [--template rms_bench_x_grown] [--profile pass.prof]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402
import common  # noqa: E402

DB = "rms_bench_retention"
BATCH = 500
OPS_PER_SESSION = 24


def grow(port: int, token: str, ids: list[str], sessions: int, days: int) -> None:
    rng = random.Random(7)
    start = datetime.now(UTC) - timedelta(days=days)
    step = timedelta(days=days) / max(1, sessions)
    api = common.Api(port, token, timeout=600)
    done = 0
    while done < sessions:
        bodies = []
        for _ in range(min(BATCH, sessions - done)):
            body = bench_ingest.session_body(rng, ids, f"r{done}")
            body["ts"] = (start + step * done).isoformat()
            bodies.append(body)
            done += 1
        status, out = api.request("POST", "/api/v1/feedback-sessions/batch", bodies)
        assert status == 207 and all(r["status"] == 201 for r in out["results"]), status
        if done % 10_000 < BATCH:
            print(f"# {done} sessions", flush=True)
    api.close()


def create_objects(api: common.Api, n: int, days: int) -> list[str]:
    """Objects created ``days`` ago, before every session (a chain's times never go back)."""
    ts = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    ids: list[str] = []
    for start in range(0, n, 1000):
        body = [
            {"namespace": common.BENCH_NAMESPACE, "content": f"fact {i}",
             "epistemic_type": "ASSERTED", "ts": ts}
            for i in range(start, min(n, start + 1000))
        ]  # fmt: skip
        status, out = api.request("POST", "/api/v1/objects", body)
        assert status == 201, (status, out)
        ids += [o["id"] for o in out]
    return ids


def db_size(db: str, *, vacuum: bool = True) -> int:
    if vacuum:
        common.vacuum("VACUUM FULL", db=db)
    return common.sql("SELECT pg_database_size(current_database())", db=db)[0][0]


def build(db: str, args: argparse.Namespace) -> None:
    """A fresh database grown to ``args.ops`` operations (then VACUUM FULL)."""
    common.setup_database(db)
    from django.db import connection, transaction

    from rms.store import partitions

    # The log partitioned (`manage.py partition_operation_log`), with the day partitions of the
    # backdated log, as the retention beat would have made them day by day while it was written.
    with transaction.atomic():
        if not args.plain:
            partitions.convert(connection, datetime.now(UTC))
        today = datetime.now(UTC).date()
        made = partitions.ensure(connection, today - timedelta(days=args.days + 2), today)
    connection.close()
    print(f"# {len(made)} day partitions made for the backdated log", flush=True)
    token = common.create_api_client("bench-retention", db=db)
    with common.Server(db=db, workers=2, threads=4) as server:
        api = common.Api(server.port, token, timeout=120)
        ids = create_objects(api, args.objects, args.days + 1)
        api.close()
        grow(server.port, token, ids, args.ops // OPS_PER_SESSION, args.days)
    common.vacuum("VACUUM FULL", db=db)


def main() -> None:
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--days", type=int, default=20)
    parser.add_argument("--db", default=DB, help="the scratch database (rms_bench*)")
    parser.add_argument(
        "--template",
        help="a grown log kept to rerun on (rms_bench*): copied into --db when it exists, else "
        "made from --db once grown. A pass changes the data, so it runs on the copy. The "
        "template's log is as old as when it was grown: its cut moves with the clock.",
    )
    parser.add_argument("--batch", type=int, help="operations per batch (default: the pass's)")
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--profile", help="write the pass's cProfile stats to this file")
    parser.add_argument(
        "--plain", action="store_true", help="keep the log one table (rows deleted, no drops)"
    )
    args = parser.parse_args()
    db = args.db
    common.django_setup(db)  # connects only when first used
    try:
        if args.template and common.database_exists(args.template):
            t0 = time.perf_counter()
            common.copy_database(args.template, db)
            print(f"# {db} copied from {args.template} in {time.perf_counter() - t0:.1f} s")
        else:
            build(db, args)
            if args.template:
                common.copy_database(db, args.template)
                print(f"# {args.template} kept as the template of later runs", flush=True)
        # compact already (VACUUM FULL after growing, before any copy)
        size_before = db_size(db, vacuum=False)
        from django.conf import settings
        from django.db import connection

        from feedback import retention
        from feedback.models import FeedbackSession
        from rms import verification
        from rms.archive_verify import verify_archive
        from rms.models import Namespace, Operation

        ops_before = Operation.objects.count()
        with tempfile.TemporaryDirectory() as archive:
            settings.RMS_ARCHIVE_URL = archive
            ns = Namespace.objects.get(name=common.BENCH_NAMESPACE)
            ns.retention_days = args.days // 2
            ns.save()
            profiler = cProfile.Profile() if args.profile else None
            t0 = time.perf_counter()
            if profiler:
                profiler.enable()
            result = retention.run_namespace(ns, batch=args.batch or retention.BATCH)
            pass_s = time.perf_counter() - t0
            if profiler:
                profiler.disable()
                profiler.dump_stats(args.profile)
            t0 = time.perf_counter()
            archived = verify_archive(ns.name)
            verify_s = time.perf_counter() - t0
            chain = verification.verify_chain_all(
                extra_heads=FeedbackSession.objects.values_list("id", "head_hash"),
                extra_total=FeedbackSession.objects.count(),
            )
            archive_bytes = sum(p.stat().st_size for p in Path(archive).rglob("*") if p.is_file())
        ops_after = Operation.objects.count()
        connection.close()
        size_after = db_size(db)
        print(
            json.dumps(
                {
                    "operations_before": ops_before,
                    "operations_archived": result["operations"],
                    "operations_after": ops_after,
                    "sessions_archived": result["sessions"],
                    "batches": result["batches"],
                    "partitions_dropped": result.get("partitions_dropped", 0),
                    "pass_seconds": round(pass_s, 1),
                    "ops_per_second": round(result["operations"] / pass_s),
                    "verify_archive_ok": archived["ok"],
                    "verify_archive_seconds": round(verify_s, 1),
                    "verify_chain_ok": chain["ok"],
                    "archive_bytes": archive_bytes,
                    "database_bytes_before": size_before,
                    "database_bytes_after": size_after,
                },
                indent=2,
            )
        )
    finally:
        if not args.keep_db:
            common.drop_database(db)


if __name__ == "__main__":
    main()
