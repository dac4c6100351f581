"""What a feedback session costs on disk (PostgreSQL): bytes and rows per table and per index.

A scratch database (``rms_bench_disk``) gets ``--objects`` objects, then ``--batches`` batches of
500 sessions (10 injections + 3 signals each, ``bench_ingest``'s traffic) through the batch
endpoint of a real server. Every table is measured after the objects (the baseline) and after
the sessions, each time after ``VACUUM (FULL, ANALYZE)`` so dead space and fill do not count:
the difference divided by the sessions is what a session costs. It also prints each index's
``idx_scan`` from ``pg_stat_user_indexes`` after the traffic (an index nothing reads is a cut
candidate; check the query plans of the reads that are not in this traffic before dropping).

    .venv/bin/python bench/bench_disk.py [--objects 5000] [--batches 4] [--keep-db] [--db NAME]

``--db`` names another scratch database (``rms_bench…``), so two runs on one server do not
collide.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ingest  # noqa: E402
import common  # noqa: E402

DB = "rms_bench_disk"

SIZES = """
SELECT c.relname, c.relkind::text, coalesce(i.indrelid::regclass::text, c.relname),
       pg_relation_size(c.oid) + coalesce(pg_relation_size(c.reltoastrelid), 0)
         + coalesce((SELECT sum(pg_relation_size(x.indexrelid)) FROM pg_index x
                     WHERE x.indrelid = c.reltoastrelid), 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
LEFT JOIN pg_index i ON i.indexrelid = c.oid
WHERE c.relkind IN ('r', 'i')
"""


def measure() -> dict[str, dict]:
    common.vacuum("VACUUM (FULL, ANALYZE)", db=DB)
    out: dict[str, dict] = {}
    for name, kind, table, size in common.sql(SIZES, db=DB):
        out[name] = {"kind": kind, "table": table, "bytes": int(size)}
    for name, entry in out.items():
        if entry["kind"] == "r":
            entry["rows"] = common.sql(f'SELECT count(*) FROM "{name}"', db=DB)[0][0]
    return out


def main() -> None:
    global DB
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--db", default=DB)
    args = parser.parse_args()
    DB = args.db
    common.setup_database(DB)
    try:
        token = common.create_api_client("bench-disk", db=DB)
        with common.Server(db=DB, workers=2, threads=4) as server:
            api = common.Api(server.port, token, timeout=120)
            ids = bench_ingest.create_objects(api, args.objects)
            api.close()
            before = measure()
            common.sql("SELECT pg_stat_reset()", db=DB)
            done = bench_ingest.run_batches(server.port, token, ids, args.batches)
            assert done["errors"] == 0, done
        scans = dict(common.sql("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes", db=DB))
        after = measure()
        sessions = done["sessions"]
        rows = []
        total_bytes = total_rows = 0
        tables = sorted(
            (n for n, e in after.items() if e["kind"] == "r"),
            key=lambda n: -(after[n]["bytes"] - before.get(n, {"bytes": 0})["bytes"]),
        )
        for table in tables:
            grown = after[table]["bytes"] - before.get(table, {"bytes": 0})["bytes"]
            new_rows = after[table]["rows"] - before.get(table, {"rows": 0})["rows"]
            indexes = sorted(
                n for n, e in after.items() if e["kind"] == "i" and e["table"] == table
            )
            index_grown = sum(
                after[i]["bytes"] - before.get(i, {"bytes": 0})["bytes"] for i in indexes
            )
            if grown + index_grown <= 0 and new_rows == 0:
                continue
            total_bytes += grown + index_grown
            total_rows += new_rows
            rows.append(
                [table, f"{new_rows / sessions:.1f}", f"{grown / sessions:,.0f}",
                 f"{index_grown / sessions:,.0f}", ""]
            )  # fmt: skip
            for i in indexes:
                g = after[i]["bytes"] - before.get(i, {"bytes": 0})["bytes"]
                rows.append(["", "", "", f"{g / sessions:,.0f}", f"{i} (scans {scans.get(i, 0)})"])
        common.print_table(
            ["table", "rows/session", "heap B/session", "index B/session", "index"], rows
        )
        print(
            f"# {sessions} sessions: {total_rows / sessions:.1f} rows and "
            f"{total_bytes / sessions / 1024:.1f} KB per session "
            "(tables + indexes, after VACUUM FULL)"
        )
    finally:
        if not args.keep_db:
            common.drop_database(DB)


if __name__ == "__main__":
    main()
