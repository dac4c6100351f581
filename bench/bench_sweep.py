"""IGNORED_REPEATEDLY sweep speed (SPEC §9): ``feedback.sweep.sweep()`` over many candidates.

Builds, in a scratch PostgreSQL database (``rms_bench_sweep``, dropped and recreated), ``--objects``
memory objects whose unused streak is at or above the namespace threshold (N = 5; a tenth have a
streak of 7), with everything the sweep reads: the objects with their OBJECT_CREATED operation,
their aggregates, and the feedback sessions and injection rows of their streaks (``--per-session``
objects per session, mostly of one topic). Rows go in with ``rms.bulk.insert`` (COPY), not
through the API. Session contexts are a mix: the objects' topic tag (relevant), another topic's
tag (irrelevant), a sentence sharing words with one object's content, or nothing (unknown); a
few objects are PERMANENT, pinned or DEPRECATED (exempt).

Then it times

  first   ``sweep()`` over every candidate (target: ≤ 5 s for 100,000 objects);
  second  ``sweep()`` again: no new sessions, so it must examine and write nothing;

and checks the result: one IGNORED_CHECK per object, one PENALTY per penalized object, no
candidate left, and the chains and replays of a sample of objects intact. With ``--profile``
the first run is profiled (cProfile, CPU time) and the top functions are printed; with
``--phases`` the wall time of each step of the sweep is printed.

    .venv/bin/python bench/bench_sweep.py [--objects 100000] [--chunk 500] [--workers 2] [--phases]
        [--profile]

Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_sweep"
NAMESPACE = "bench-sweep"
TARGET_SECONDS = 5.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)

TOPICS = [f"topic{i}" for i in range(50)]
_WORDS_TEXT = """
    invoice refund plan annual monthly customer account password reset login email server
    deploy database backup restore region latency cache queue worker retry timeout billing
    discount coupon renewal trial upgrade downgrade seat license contract support ticket
    priority escalation holiday schedule shipping warehouse order return label tracking
"""
WORDS = _WORDS_TEXT.split()
EXEMPT_SHARE = {"PERMANENT": 0.02, "pinned": 0.02, "DEPRECATED": 0.01}
LONG_STREAK_SHARE = 0.10  # objects with a streak of 7 instead of 5


def build(n_objects: int, per_session: int, seed: int) -> dict:
    """Insert the objects, their OBJECT_CREATED operations, sessions, injections, aggregates."""
    from django.contrib.auth import get_user_model

    from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent
    from rms import bulk, oplog, policy
    from rms.models import GENESIS_HASH, ApiClient, MemoryObject, Namespace, Operation, new_row

    rng = random.Random(seed)
    ns = Namespace.objects.create(name=NAMESPACE, ignore_threshold=5)
    user = get_user_model().objects.create(username="bench-sweep")
    client = ApiClient.objects.create(user=user, name="bench-sweep", role="admin", token_hash="-")

    t = time.perf_counter()
    objects, ops, topic_of, streak_of = [], [], {}, {}
    for i in range(n_objects):
        topic = rng.choice(TOPICS)
        epistemic = rng.choice(["OBSERVED", "ASSERTED", "INFERRED"])
        roll = rng.random()
        decay = "PERMANENT" if roll < EXEMPT_SHARE["PERMANENT"] else None
        state = policy.initial_state(epistemic_type=epistemic, decay_profile=decay)
        obj = MemoryObject(
            id=uuid.UUID(int=rng.getrandbits(128), version=4),
            namespace=ns,
            content=" ".join(rng.sample(WORDS, 8)) + f" {topic} note {i}",
            domain_tags=[topic],
            created_by="bench",
            created_by_type="SYSTEM_PROCESS",
            created_at=T0,
            last_op_ts=T0,
            head_hash=GENESIS_HASH,
        )
        obj.apply_state(state)
        ops.append(oplog.object_created(obj, ts=T0, actor_id="bench", actor_type="SYSTEM_PROCESS"))
        # Pinned and DEPRECATED objects get there the way the services do, so replays hold.
        change = None
        if roll >= EXEMPT_SHARE["PERMANENT"]:
            if roll < EXEMPT_SHARE["PERMANENT"] + EXEMPT_SHARE["pinned"]:
                payload = {"reason": "bench", "confidence_requested": None}
                change = ("PIN", policy.pin(state), payload)
            elif roll < sum(EXEMPT_SHARE.values()):
                payload = {"from": epistemic, "to": policy.DEPRECATED, "reason": "bench"}
                change = (
                    "EPISTEMIC_TRANSITION",
                    policy.transition(state, policy.DEPRECATED),
                    payload,
                )
        if change is not None:
            op_type, after, payload = change
            obj.apply_state(after)
            payload["confidence_before"] = state.confidence
            payload["confidence_after"] = after.confidence
            ops.append(
                oplog.admin_change(
                    obj,
                    op_type,
                    ts=T0,
                    payload=payload,
                    actor_id="bench",
                    actor_type="SYSTEM_PROCESS",
                )
            )
        objects.append(obj)
        topic_of[obj.pk] = topic
        streak_of[obj.pk] = 7 if rng.random() < LONG_STREAK_SHARE else 5

    # Streak sessions, round by round: objects grouped by topic so a session is mostly about one.
    sessions, injections = [], []
    by_id = {o.pk: o for o in objects}
    minute = 0
    for rnd in range(max(streak_of.values())):
        live = [o.pk for o in objects if streak_of[o.pk] > rnd]
        rng.shuffle(live)
        live.sort(key=lambda pk: topic_of[pk])
        for start in range(0, len(live), per_session):
            group = live[start : start + per_session]
            minute += 1
            ts = T0 + timedelta(hours=1 + rnd, microseconds=minute)
            topic = topic_of[group[0]]
            kind = rng.random()
            tags, text = [], ""
            if kind < 0.90:
                tags = [topic]  # relevant to the group's topic
            elif kind < 0.92:
                tags = [rng.choice(TOPICS)]  # usually another topic: irrelevant
            elif kind < 0.96:
                words = by_id[rng.choice(group)].content.split()[:6]
                text = "Question about " + " ".join(words)
            session_pk = uuid.UUID(int=rng.getrandbits(128), version=4)
            sessions.append(
                new_row(
                    FeedbackSession,
                    id=session_pk,
                    client_id=client.pk,
                    request_id=f"b{minute}",
                    body_hash="-",
                    session_id=f"conv-{minute % 997}",
                    ts=ts,
                    namespace_scope=[NAMESPACE],
                    context_budget=4000,
                    tokens_used=1000,
                    context_text=text,
                    context_tags=tags,
                    outcome=None,
                    record={},
                    head_hash=GENESIS_HASH,
                    last_op_ts=ts,
                )
            )
            for rank, pk in enumerate(group, 1):
                injections.append(
                    new_row(
                        InjectionEvent,
                        id=None,
                        session_id=session_pk,
                        object_id=pk,
                        namespace_id=ns.pk,
                        ts=ts,
                        rank_position=rank,
                        representation_type="",
                        token_cost=50,
                        composite_score=0.5,
                        str_value=0.01,
                        ended_unused=True,
                    )
                )
                by_id[pk].last_op_ts = ts
    aggs = [
        new_row(
            FeedbackAggregate,
            object_id=o.pk,
            namespace_id=ns.pk,
            total_injections=streak_of[o.pk],
            total_token_cost=50 * streak_of[o.pk],
            total_referenced=0,
            total_confirmed=0,
            total_task_completed=0,
            total_corrected=0,
            total_unused=streak_of[o.pk],
            usage_ratio=0.0,
            last_positive_signal=None,
            last_negative_signal=None,
            lifetime_gamma_applied=0.0,
            lifetime_delta_applied=0.0,
            unused_streak=streak_of[o.pk],
            utility=0.5,
            uses=0,
            last_use_at=None,
            unused_sessions=streak_of[o.pk],
            checked_unused_sessions=0,
        )
        for o in objects
    ]
    generated = time.perf_counter() - t

    from django.db import connection, transaction

    t = time.perf_counter()
    with transaction.atomic():
        bulk.insert(MemoryObject, objects)
        bulk.insert(Operation, ops)
        bulk.insert(FeedbackSession, sessions)
        bulk.insert(InjectionEvent, injections)
        bulk.insert(FeedbackAggregate, aggs)
    inserted = time.perf_counter() - t
    with connection.cursor() as cur:
        for table in ("rms_memoryobject", "rms_operation", "feedback_feedbacksession",
                      "feedback_injectionevent", "feedback_feedbackaggregate"):  # fmt: skip
            cur.execute(f"VACUUM ANALYZE {table}")
    print(
        f"# built {len(objects):,} objects, {len(sessions):,} sessions, {len(injections):,} "
        f"injections: generated in {generated:.1f} s, inserted (COPY) in {inserted:.1f} s"
    )
    return {"objects": len(objects), "sessions": len(sessions), "injections": len(injections)}


class Phases:
    """Wall time per step of the sweep (``--phases``): wraps the sweep module's steps for the
    duration of one run. Measurement only; restores everything on exit."""

    def __init__(self) -> None:
        from collections import Counter

        self.seconds: Counter = Counter()
        self._undo: list = []

    def _wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self) -> Phases:
        from feedback import services, sweep

        steps = [
            (sweep, "lock_objects", "lock objects (rms.locks)"),
            (services.AggregateStore, "__init__", "load aggregates (AggregateStore)"),
            (sweep, "_streak_sessions", "streak sessions query"),
            (sweep._Contexts, "load", "session contexts query"),
            (sweep, "_check_object", "decide + build operations (Python)"),
            (sweep.bulk, "insert", "insert operations + signal records (COPY)"),
            (services.AggregateStore, "flush", "write aggregates (bulk.update)"),
        ]
        for owner, name, label in steps:
            self._wrap(owner, name, label)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def table(self, total: float, n: int) -> None:
        # bulk.update also writes the aggregates, which are counted on their own line.
        rows = [
            [label, f"{secs:.2f}", f"{100 * secs / total:.0f}%", f"{1e6 * secs / n:.0f}"]
            for label, secs in self.seconds.most_common()
        ]
        other = total - sum(self.seconds.values())
        rows.append(["objects update + candidates + commits", f"{other:.2f}",
                     f"{100 * other / total:.0f}%", f"{1e6 * other / n:.0f}"])  # fmt: skip
        common.print_table(["step of the first run", "seconds", "share", "us/object"], rows)


def profile_table(prof: cProfile.Profile, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def run(args) -> bool:
    common.recreate_database(DB)
    try:
        t = time.perf_counter()
        common.manage("migrate", "--noinput", db=DB)
        print(f"# database {DB}: recreated and migrated in {time.perf_counter() - t:.1f} s")
        common.django_setup(DB)
        return measure(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep_db:
            common.drop_database(DB)


def measure(args) -> bool:
    from django.db import connection

    from feedback.models import FeedbackAggregate
    from feedback.sweep import WORKERS, candidates, sweep

    if args.workers is None:
        # Step timers add up across threads: --phases times the single-thread run.
        args.workers = 1 if args.phases else WORKERS
    from rms.models import MemoryObject, Operation
    from rms.verification import verify_object_chain, verify_object_replay

    sizes = build(args.objects, args.per_session, args.seed)
    n = sizes["objects"]
    assert candidates(NAMESPACE).count() == n

    marks: list[tuple[float, float]] = []
    t0 = time.perf_counter()

    backends: dict[int, float] = {}
    monitor = common._admin_connection() if args.workers > 1 else None

    def progress(fraction: float) -> None:
        marks.append((fraction, time.perf_counter() - t0))
        if monitor is not None:
            # The worker threads' connections close when the sweep returns: read their
            # backends' CPU after every chunk, while they are there (new connections start at 0).
            for pid in common.pg_backend_pids(DB, monitor):
                backends[pid] = max(backends.get(pid, 0.0), common._proc_cpu_seconds(pid))

    # The build takes a while and this machine may be shared: wait for quiet again, and report
    # CPU seconds (this process and its PostgreSQL backend) beside wall time.
    common.wait_for_quiet(args.wait_quiet)
    # CPU time, not wall time: waiting for PostgreSQL shows up in the backend figure instead.
    prof = cProfile.Profile(time.process_time) if args.profile else None
    phases = Phases() if args.phases else contextlib.nullcontext()
    with common.CpuMeter(None, DB) as cpu, phases:
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        first = sweep(chunk_size=args.chunk, progress=progress, workers=args.workers)
        if prof is not None:
            prof.disable()
        first_s = time.perf_counter() - t0
    ops_first = Operation.objects.filter(op_type__in=["IGNORED_CHECK", "FEEDBACK_EVENT", "PENALTY"])
    written = ops_first.count()

    count_before = Operation.objects.count()
    t0 = time.perf_counter()
    second = sweep(chunk_size=args.chunk, workers=args.workers)
    second_s = time.perf_counter() - t0
    count_after = Operation.objects.count()

    print(f"# first run: {first}")
    print(f"# second run: {second}")
    halfway = next((s for f, s in marks if f >= 0.5), None)
    print()
    common.print_table(
        ["run", "objects", "seconds", "objects/s", "operations written", "target"],
        [
            ["first", f"{first['examined']:,}", f"{first_s:.2f}",
             common.fmt_rate(first["examined"] / first_s), f"{written:,}",
             f"<= {TARGET_SECONDS:.0f} s: {'met' if first_s <= TARGET_SECONDS else 'MISSED'}"],
            ["second (idempotent)", f"{second['examined']:,}", f"{second_s:.2f}", "-",
             f"{count_after - count_before:,}", "writes nothing"],
        ],
    )  # fmt: skip
    if halfway is not None:
        print(f"# progress: 50% after {halfway:.2f} s, {len(marks)} chunk(s) of {args.chunk}")
    threads_pg = sum(v for pid, v in backends.items() if pid not in cpu.pg0)
    if monitor is not None:
        monitor.close()
    print(
        f"# first run CPU ({args.workers} worker thread(s)): sweep process {cpu.client:.1f} s, "
        f"its PostgreSQL backends {cpu.postgres + threads_pg:.1f} s, other processes "
        f"{max(0.0, cpu.other - threads_pg):.1f} s; machine {cpu.utilisation:.0f}% busy"
    )

    checks = []
    checks.append(("one IGNORED_CHECK per object",
                   Operation.objects.filter(op_type="IGNORED_CHECK").count() == n))  # fmt: skip
    checks.append(
        (
            "one PENALTY per penalized object",
            Operation.objects.filter(op_type="PENALTY").count() == first["penalized"],
        )
    )
    checks.append(("second run examined and wrote nothing",
                   second["examined"] == 0 and count_after == count_before))  # fmt: skip
    checks.append(("no candidate left", candidates(NAMESPACE).count() == 0))
    checks.append(
        (
            "penalized streaks reset to 0",
            FeedbackAggregate.objects.filter(unused_streak=0).count() == first["penalized"],
        )
    )
    sample = list(MemoryObject.objects.select_related("namespace").order_by("?")[:200])
    checks.append(("200 sampled chains intact",
                   all(verify_object_chain(o) is None for o in sample)))  # fmt: skip
    checks.append(("200 sampled replays identical",
                   all(verify_object_replay(o) == [] for o in sample)))  # fmt: skip
    print()
    for name, ok in checks:
        print(f"check {name}: {'OK' if ok else 'FAILED'}")
    if args.phases:
        print()
        phases.table(first_s, max(1, first["examined"]))
    if prof is not None:
        print()
        print(profile_table(prof, args.profile_lines))
    connection.close()
    return all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=10, help="objects per session")
    parser.add_argument("--chunk", type=int, default=500, help="objects per transaction")
    parser.add_argument(
        "--workers", type=int, default=None, help="chunks at once (default: the sweep's WORKERS)"
    )
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile the first run")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument("--phases", action="store_true", help="wall time per step of the run")
    parser.add_argument("--keep-db", action="store_true", help=f"do not drop {DB}")
    parser.add_argument("--wait-quiet", type=float, default=30.0)
    args = parser.parse_args(argv)
    common.stop_on_sigterm()
    if not (
        1 <= args.objects <= 1_000_000
        and 1 <= args.per_session <= 100
        and 1 <= args.chunk <= 10_000
        and (args.workers is None or 1 <= args.workers <= 8)
    ):
        parser.error("bounded: objects 1-1,000,000, per-session 1-100, chunk 1-10,000, workers 1-8")
    common.wait_for_quiet(args.wait_quiet)
    print(
        f"# sweep benchmark: {args.objects:,} candidate objects, chunks of {args.chunk}, "
        f"PostgreSQL database {DB}"
    )
    return 0 if run(args) else 1


if __name__ == "__main__":
    sys.exit(main())
