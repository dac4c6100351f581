"""The change feed's page read in the store alone, the cursor written two ways on the same pages:
per row whole (the form a deployment id that is not hex still takes, and every id before the
suffix was encoded once per page) and per page (``rms.store.pgfeed.cursor_parts``).

    .venv/bin/python bench/bench_feed_pages.py [--events 300000] [--db rms_bench_feed_pages]

The two forms read the same pages, 20 at a time, alternating (which one first changes every
round), so a load that drifts during the run weighs on both alike; the figure is the time of
each form per event and the median ratio of the pairs. Then the cost of a page's row objects:
``FeedRow`` as the store builds it now against the two frozen dataclasses it was before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import timeit
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_feed  # noqa: E402
import common  # noqa: E402

PAIR_PAGES = 20
PAGE = 1000
#: A hex id takes the per-page form; one character outside hex takes the per-row form.
HEX_ID, OTHER_ID = "0123456789abcdef", "0123456789abcdeX"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", default="rms_bench_feed_pages")
    args = parser.parse_args(argv)
    common.stop_on_sigterm()
    bench_feed.DB = args.db
    common.setup_database(args.db)
    try:
        bench_feed.build_log(args.events)
        common.django_setup(args.db)
        from rms import events
        from rms.store import pgfeed

        below = pgfeed.horizon()
        ops = list(events.V1_CHANGE_OPS)

        def pages(after, count, issuer):
            t0 = time.perf_counter()
            for _ in range(count):
                rows = pgfeed.rows(after, below=below, limit=PAGE + 1, op_types=ops,
                                   namespaces=None, as_json=True, deployment=issuer)  # fmt: skip
                after = rows[PAGE - 1].position
            return time.perf_counter() - t0, after

        pairs = args.events // PAGE // PAIR_PAGES - 1
        pages(events.START, pairs * PAIR_PAGES, HEX_ID)  # warm both
        pages(events.START, pairs * PAIR_PAGES, OTHER_ID)
        load = os.getloadavg()[0]
        ratios, per_row, per_page = [], 0.0, 0.0
        for rnd in range(args.rounds):
            after = events.START
            for _ in range(pairs):
                order = (OTHER_ID, HEX_ID) if rnd % 2 else (HEX_ID, OTHER_ID)
                timed = {issuer: pages(after, PAIR_PAGES, issuer) for issuer in order}
                (whole, after), (once, _) = timed[OTHER_ID], timed[HEX_ID]
                ratios.append(whole / once)
                per_row, per_page = per_row + whole, per_page + once
        n = len(ratios) * PAIR_PAGES * PAGE
        print(f"# load {load:.2f} at the start; {len(ratios)} pairs of {PAIR_PAGES} pages")
        common.print_table(
            ["cursor written", "µs an event", "per row / per page"],
            [["per row, whole", f"{per_row / n * 1e6:.2f}", ""],
             ["suffix once per page", f"{per_page / n * 1e6:.2f}",
              f"median {statistics.median(ratios):.3f}, total {per_row / per_page:.3f}"]],
        )  # fmt: skip

        @dataclass(frozen=True)
        class Before:  # FeedRow and its Position before: two frozen dataclasses per row
            position: events.Position
            type: str | None
            event: str

        rows = [(1000 + i, i, "object.reinforced", "x" * 650) for i in range(PAGE)]
        before = min(timeit.repeat(
            lambda: [Before(events.Position(int(t), int(s)), ty, b) for t, s, ty, b in rows],
            number=50, repeat=7))  # fmt: skip
        now = min(timeit.repeat(lambda: list(map(events.FeedRow._make, rows)), number=50, repeat=7))
        print(
            f"# a page's row objects: FeedRow {now / 50 / PAGE * 1e6:.2f} µs an event, "
            f"before {before / 50 / PAGE * 1e6:.2f}"
        )
    finally:
        if not os.environ.get("RMS_BENCH_KEEP_DB"):
            common.drop_database(args.db)
    return 0


if __name__ == "__main__":
    sys.exit(main())
