"""Run every benchmark in turn, each in its own process, with modest defaults (``make bench``).

Each script prints its own figures; this runner adds a header per script, a time limit per script
and a final status line. Later issues add their scripts to ``BENCHMARKS``.

    .venv/bin/python bench/run_all.py [--quick] [--only bench_signals ...]

Exit status 1 if any benchmark failed (non-zero exit, failed check or time limit).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent

#: (script, default arguments, --quick arguments, time limit in seconds)
BENCHMARKS: list[tuple[str, list[str], list[str], int]] = [
    (
        "bench_signals.py",
        ["--seconds", "10", "--threads", "8", "--objects", "1000", "--wait-quiet", "10"],
        ["--seconds", "3", "--threads", "8", "--objects", "200", "--wait-quiet", "0"],
        600,
    ),
    (
        "bench_replay.py",
        ["--objects", "2000", "--ops", "100", "--repeat", "3", "--db", "--wait-quiet", "10"],
        [
            "--objects",
            "300",
            "--ops",
            "100",
            "--repeat",
            "1",
            "--db",
            "--db-objects",
            "50",
            "--wait-quiet",
            "0",
        ],
        600,
    ),  # fmt: skip
    (
        "bench_worker.py",
        ["--ops", "250000"],
        ["--ops", "20000", "--objects", "200"],
        900,
    ),
    ("bench_ingest.py", [], ["--objects", "2000", "--single", "80", "--batches", "2"], 900),
    ("bench_sweep.py", [], ["--objects", "5000"], 900),
    ("bench_dashboard.py", [], ["--objects", "5000", "--injections", "50000"], 1200),
    ("detection_bench.py", [], [], 300),
    ("bench_explicit.py", ["--sessions", "2000"], ["--sessions", "300"], 300),
    (
        "profile_signals.py",
        ["--signals", "1000", "--wait-quiet", "10"],
        ["--signals", "200", "--warmup", "20", "--wait-quiet", "0"],
        300,
    ),
    ("profile_ingest.py", [], ["--batches", "1", "--objects", "1000"], 300),
    ("bench_client.py", [], ["--calls", "3000", "--sessions", "1000"], 600),
    ("bench_otlp.py", ["--sessions", "3000"], ["--sessions", "500", "--objects", "1000"], 900),
    (
        "bench_feed.py",
        ["--events", "1000000", "--seconds", "20"],
        ["--events", "50000", "--seconds", "5"],
        1200,
    ),
    (
        "bench_retrieval.py",
        ["--seeds", "0", "1", "2", "3", "4", "100", "101", "102", "103", "104"],
        ["--seeds", "0", "--sessions", "10"],
        1200,
    ),
    # bench_growth: PERFORMANCE.md's figures need --sizes 1000000,2000000,5000000,10000000 (~30 min)
    (
        "bench_growth.py",
        ["--sizes", "250000,1000000", "--plot", "var/bench/growth.svg"],
        [
            "--sizes",
            "30000,60000",
            "--objects",
            "2000",
            "--samples",
            "20",
            "--batches",
            "2",
            "--runs",
            "3",
            "--rounds",
            "1",
            "--plot",
            "var/bench/growth.svg",
        ],
        1800,
    ),
]


def run(script: str, args: list[str], limit: int) -> tuple[int, float]:
    """Run one benchmark in its own process group, so a time-out also stops its server."""
    cmd = [common.PYTHON, str(BENCH_DIR / script), *args]
    print(f"\n{'=' * 100}\n$ {' '.join([Path(cmd[0]).name, *cmd[1:]])}\n{'=' * 100}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=common.ROOT, start_new_session=True)
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"!! {script}: time limit of {limit} s reached; stopping it", flush=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the group of the process we started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        code = -1
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        raise
    return code, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--only", nargs="*", default=[], help="script names (without .py)")
    args = parser.parse_args(argv)
    selected = [b for b in BENCHMARKS if not args.only or Path(b[0]).stem in args.only]
    if not selected:
        parser.error(f"--only: choose from {', '.join(Path(b[0]).stem for b in BENCHMARKS)}")
    results = []
    for script, normal, quick, limit in selected:
        code, took = run(script, quick if args.quick else normal, limit)
        results.append((script, code, took))
    print(f"\n{'=' * 100}")
    common.print_table(
        ["benchmark", "status", "seconds"],
        [[s, "ok" if c == 0 else f"FAILED ({c})", f"{t:.0f}"] for s, c, t in results],
    )
    return 0 if all(c == 0 for _, c, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
