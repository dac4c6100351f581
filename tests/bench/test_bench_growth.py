"""The growth bench's stand-in for autovacuum (bench/bench_growth.py).

The PostgreSQL the benchmarks run on has autovacuum off, so the bench vacuums what autovacuum
would: without it the objects and aggregates (one dead row version per write) grew with the log
and the overview's object statistics read 8x the heap at 10M operations for the same 20,000
rows.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SERVER = {  # PostgreSQL's defaults
    "autovacuum_vacuum_threshold": "50",
    "autovacuum_vacuum_scale_factor": "0.2",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.2",
}


def load_bench():
    path = ROOT / "bench" / "bench_growth.py"
    spec = importlib.util.spec_from_file_location("bench_growth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dead_row_rule():
    bench = load_bench()
    stats = [
        # 20,000 live rows: the limit is 50 + 0.2 * 20,000 = 4,050 dead rows
        ("feedback_feedbackaggregate", 20_000, 4_051, 0, {}),
        ("rms_memoryobject", 20_000, 4_050, 0, {}),
        ("empty", 0, 50, 0, {}),  # 50 is not more than 50
        ("small", 0, 51, 0, {}),
    ]
    assert bench.tables_to_vacuum(stats, SERVER) == ["feedback_feedbackaggregate", "small"]
    assert bench.tables_to_vacuum(stats, {**SERVER, "autovacuum_vacuum_threshold": "0"}) == [
        "empty",
        "feedback_feedbackaggregate",
        "rms_memoryobject",
        "small",
    ]


def test_insert_rule_with_the_tables_own_settings():
    bench = load_bench()
    fixed = {
        "autovacuum_vacuum_insert_scale_factor": "0",
        "autovacuum_vacuum_insert_threshold": "100000",
    }
    stats = [
        # by default: more than 1,000 + 0.2 * 4M = 801,000 rows inserted since the last vacuum
        ("rms_operation", 4_000_000, 0, 801_001, {}),
        ("feedback_signalrecord", 4_000_000, 0, 801_000, {}),
        # with a fixed threshold (feedback migration 0012), whatever the size
        ("feedback_injectionevent", 4_000_000, 0, 100_001, fixed),
        ("feedback_sessionnamespace", 4_000_000, 0, 100_000, fixed),
    ]
    assert bench.tables_to_vacuum(stats, SERVER) == ["feedback_injectionevent", "rms_operation"]


def test_the_last_page_cursor_is_the_apis_own():
    from datetime import UTC, datetime, timedelta, timezone

    from rms.api import pagination

    bench = load_bench()
    ts = datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=timezone(timedelta(hours=2)))
    expected = pagination.encode_cursor([123, ts.astimezone(UTC).isoformat()])
    assert bench.page_cursor(123, ts) == expected
