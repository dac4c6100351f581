"""The growth bench's stand-in for autovacuum (bench/bench_growth.py, issue #17).

The PostgreSQL the benchmarks run on has autovacuum off, so the bench vacuums what autovacuum
would: without it the objects and aggregates (one dead row version per write) grew with the log
and the overview's object statistics read 8x the heap at 10M operations for the same 20,000
rows.
"""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    path = ROOT / "bench" / "bench_growth.py"
    spec = importlib.util.spec_from_file_location("bench_growth", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tables_to_vacuum_applies_autovacuums_dead_row_rule():
    bench = load_bench()
    stats = [
        # 20,000 live rows: the limit is 50 + 0.2 * 20,000 = 4,050 dead rows
        ("feedback_feedbackaggregate", 20_000, 4_051),
        ("rms_memoryobject", 20_000, 4_050),
        # an insert-only table is never picked, however large
        ("rms_operation", 10_000_000, 0),
        ("feedback_sessionnamespace", 0, 51),
        ("empty", 0, 50),  # 50 is not more than 50
    ]
    assert bench.tables_to_vacuum(stats, 50, 0.2) == [
        "feedback_feedbackaggregate",
        "feedback_sessionnamespace",
    ]
    assert bench.tables_to_vacuum(stats, 0, 0.0) == [
        "empty",
        "feedback_feedbackaggregate",
        "feedback_sessionnamespace",
        "rms_memoryobject",
    ]
