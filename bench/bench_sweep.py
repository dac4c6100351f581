"""IGNORED_REPEATEDLY sweep speed (SPEC §9): ``feedback.sweep.sweep()`` over many candidates.

Builds, in a scratch PostgreSQL database (``rms_bench_sweep``, dropped and recreated), ``--objects``
memory objects whose unused streak is at or above the namespace threshold (N = 5; a tenth have a
streak of 7), with everything the sweep reads: the objects with their OBJECT_CREATED operation,
their aggregates, and the feedback sessions and injection rows of their streaks (``--per-session``
objects per session, mostly of one topic). Rows go in with ``rms.store``'s insert (COPY), not
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

With ``--worker-processes N`` the sweep (or, with ``--kind``, the chain or replay
verification of the same database: one operation per object) runs as a TaskRun fanned out over
real Celery workers (``celery worker --pool solo``, one task at a time each) on Redis: the built
database is the template of a fresh copy per round, and rounds alternate 1 worker process and
N (``--rounds`` times each: 1, N, 1, N, ...), so both see the same machine. Each round reports
the wall time from sending the run to its success, the CPU of the worker processes and of
their PostgreSQL backends (sampled every 50 ms while the run goes: backends that come and go
between samples are undercounted; the machine's total busy time is printed beside it), CPU per
decision, and the speed-up of N over 1 (best round of each); then each round's timeline from
the chunks' timestamps (planning, the gaps between a worker's chunks, the straggling last one).

    .venv/bin/python bench/bench_sweep.py [--objects 100000] [--chunk 500] [--phases] [--profile]
    .venv/bin/python bench/bench_sweep.py --worker-processes 2 [--chunk-size 1000] [--rounds 2]
        [--kind ignored_sweep|verify_chain|verify_replay]

Exit status 1 if a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import random
import re
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_sweep"  # --db: another scratch name (several benchmarks on one server)
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
    from rms import oplog, policy, store
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
    db = store.get()
    with transaction.atomic():
        db.insert(MemoryObject, objects)
        db.insert(Operation, ops)
        db.insert(FeedbackSession, sessions)
        db.insert(InjectionEvent, injections)
        db.insert(FeedbackAggregate, aggs)
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
        self.backend: Counter = Counter()  # the PostgreSQL backend's CPU seconds in the step
        self._undo: list = []
        self._pid: int | None = None

    def _wrap(self, owner, name: str, label: str, per_object: bool = False) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            # /proc is read around the per-chunk steps only (a read costs ~20 us).
            pg = None if per_object else common._proc_cpu_seconds(self._pid)
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t
                if pg is not None:
                    self.backend[label] += common._proc_cpu_seconds(self._pid) - pg

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def __enter__(self) -> Phases:
        from django.db import connection

        from feedback import sweep
        from rms import store

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (self._pid,) = cursor.fetchone()

        db = type(store.get())
        steps = [
            (db, "lock_objects", "lock objects (rms.store)"),
            (sweep, "load_aggregates", "load aggregates"),
            (sweep, "_streak_sessions", "streak sessions query"),
            (sweep.SessionContexts, "load", "session contexts query"),
            (sweep, "_check_object", "decide + build operations (Python)"),
            (db, "insert", "insert operations + signal records (COPY)"),
            (sweep, "write_aggregates", "write aggregates (store update)"),
        ]
        for owner, name, label in steps:
            self._wrap(owner, name, label, per_object=name == "_check_object")
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def table(self, total: float, n: int) -> None:
        # the store's update also writes the aggregates, which are counted on their own line.
        rows = [
            [label, f"{secs:.2f}", f"{100 * secs / total:.0f}%", f"{1e6 * secs / n:.0f}",
             "-" if label not in self.backend else f"{1e6 * self.backend[label] / n:.0f}"]
            for label, secs in self.seconds.most_common()
        ]  # fmt: skip
        other = total - sum(self.seconds.values())
        rows.append(["objects update + candidates + commits", f"{other:.2f}",
                     f"{100 * other / total:.0f}%", f"{1e6 * other / n:.0f}", "-"])  # fmt: skip
        common.print_table(
            ["step of the first run", "seconds", "share", "us/object", "PG CPU us/object"], rows
        )


def profile_table(prof: cProfile.Profile, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def check_db_name(name: str) -> str:
    """A scratch database name this benchmark may drop: ``rms_…bench…`` (it and its ``_copy``
    are dropped and recreated)."""
    if not re.fullmatch(r"rms_[a-z0-9_]*bench[a-z0-9_]*", name) or len(name) > 50:
        raise argparse.ArgumentTypeError(f"refusing {name!r}: a scratch name is rms_*bench*")
    return name


def recreate_database(name: str) -> None:
    check_db_name(name)
    with common._admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    check_db_name(name)
    with common._admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_exists(name: str) -> bool:
    with common._admin_connection() as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()


def run(args) -> bool:
    if args.reuse_db and database_exists(DB):
        # The runs go on copies: the built database is left as it was built.
        common.django_setup(DB)
        from feedback.sweep import candidates

        n = candidates(NAMESPACE).count()
        print(f"# database {DB}: reused as built before ({n:,} candidates)")
        try:
            if args.worker_processes:
                return measure_workers(args, n)
            return in_process_on_copy(args, n)
        finally:
            from django.db import connections

            connections.close_all()
    recreate_database(DB)
    try:
        t = time.perf_counter()
        common.manage("migrate", "--noinput", db=DB)
        print(f"# database {DB}: recreated and migrated in {time.perf_counter() - t:.1f} s")
        common.django_setup(DB)
        return measure(args)
    finally:
        from django.db import connections

        connections.close_all()
        if not (args.keep_db or args.reuse_db):
            drop_database(DB)


def measure(args) -> bool:
    from feedback.sweep import candidates

    sizes = build(args.objects, args.per_session, args.seed)
    n = sizes["objects"]
    assert candidates(NAMESPACE).count() == n
    if args.worker_processes:
        return measure_workers(args, n)
    if args.reuse_db:  # the built database stays as built for the next --reuse-db run
        return in_process_on_copy(args, n)
    return in_process(args, n)


def in_process_on_copy(args, n: int) -> bool:
    """:func:`in_process` on a fresh copy of the built database, dropped afterwards."""
    copy = fresh_copy(DB)
    try:
        return in_process(args, n)
    finally:
        switch_database("postgres")
        drop_database(copy)


def in_process(args, n: int) -> bool:
    """The sweep called in this process (no Celery), timed, profiled or split into phases."""
    from django.db import connection

    from feedback.models import FeedbackAggregate
    from feedback.sweep import candidates, sweep
    from rms.models import MemoryObject, Operation
    from rms.verification import verify_object_chain, verify_object_replay

    connection.ensure_connection()  # the CPU meter finds this process's backend
    marks: list[tuple[float, float]] = []
    t0 = time.perf_counter()

    def progress(fraction: float) -> None:
        marks.append((fraction, time.perf_counter() - t0))

    # The build takes a while and this machine may be shared: wait for quiet again, and report
    # CPU seconds (this process and its PostgreSQL backend) beside wall time.
    common.wait_for_quiet(args.wait_quiet)
    # CPU time, not wall time: waiting for PostgreSQL shows up in the backend figure instead.
    prof = cProfile.Profile(time.process_time) if args.profile else None
    phases = Phases() if args.phases else contextlib.nullcontext()
    with common.CpuMeter(None, connection.settings_dict["NAME"]) as cpu, phases:
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        first = sweep(chunk_size=args.chunk, progress=progress)
        if prof is not None:
            prof.disable()
        first_s = time.perf_counter() - t0
    ops_first = Operation.objects.filter(op_type__in=["IGNORED_CHECK", "FEEDBACK_EVENT", "PENALTY"])
    written = ops_first.count()

    count_before = Operation.objects.count()
    t0 = time.perf_counter()
    second = sweep(chunk_size=args.chunk)
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
    print(
        f"# first run CPU: sweep process {cpu.client:.1f} s, its PostgreSQL backend "
        f"{cpu.postgres:.1f} s, other processes {cpu.other:.1f} s; machine "
        f"{cpu.utilisation:.0f}% busy; {1e6 * (cpu.client + cpu.postgres) / max(1, n):.0f} us "
        "of CPU per decision"
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
        if args.profile_out:
            prof.dump_stats(args.profile_out)
    connection.close()
    return all(ok for _, ok in checks)


# --- the sweep fanned out over real worker processes ---------------------------------------------


class Workers:
    """``count`` real ``celery worker --pool solo`` processes on ``db``, on a queue of their own."""

    def __init__(self, count: int, db: str, redis_url: str) -> None:
        import socket
        import subprocess

        self.queue = f"bench-sweep-{uuid.uuid4().hex[:8]}"
        self.names = [f"{self.queue}-{k}@{socket.gethostname()}" for k in range(count)]
        env = common.bench_env(db, redis_url=redis_url)
        log_dir = common.BENCH_VAR_DIR
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = []
        for name in self.names:
            log = open(log_dir / f"{name.split('@')[0]}.log", "w")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "celery", "-A", "rms", "worker", "--pool", "solo",
                     "-Q", self.queue, "-n", name, "-l", "warning", "--without-gossip",
                     "--without-mingle", "--without-heartbeat"],
                    cwd=common.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )
            )  # fmt: skip
            log.close()

    def wait_ready(self, timeout: float = 120.0) -> None:
        from taskruns.models import WorkerHeartbeat

        deadline = time.monotonic() + timeout
        while WorkerHeartbeat.objects.filter(name__in=self.names).count() < len(self.names):
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                raise RuntimeError("a worker did not start: see var/bench/bench-sweep-*.log")
            time.sleep(0.1)

    def cpu(self) -> float:
        return sum(common._proc_cpu_seconds(p.pid) for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except Exception:
                proc.kill()


def switch_database(name: str) -> None:
    """Point this process's Django connection at ``name`` (a copy of the built database)."""
    from django.db import connections

    connections.close_all()
    connections.databases["default"]["NAME"] = name
    connections["default"].settings_dict["NAME"] = name


def fresh_copy(template: str) -> str:
    """Recreate ``{DB}_copy`` from ``template`` and point this process at it; its name."""
    copy = f"{DB}_copy"
    switch_database("postgres")
    with common._admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{template}"')
    switch_database(copy)
    return copy


def one_round(args, count: int, template: str, n: int) -> dict:
    from django.db import connection

    from feedback.sweep import candidates
    from rms.celery import app
    from rms.models import Operation
    from taskruns import kinds, runs
    from taskruns.models import TaskRun

    copy = fresh_copy(template)
    workers = Workers(count, copy, args.redis)
    monitor = common._admin_connection()
    try:
        workers.wait_ready()
        # django_setup dropped the caller's broker settings: this process publishes to Redis too.
        app.conf.broker_url = args.redis
        app.conf.broker_transport_options = {"visibility_timeout": 4200}
        app.conf.task_default_queue = workers.queue
        common.wait_for_quiet(args.wait_quiet)
        params = {"chunk_size": args.chunk_size}
        run = TaskRun.objects.create(
            kind=args.kind,
            params=kinds.validate_params(args.kind, params),
            created_by="bench",
        )
        with connection.cursor() as cur:  # this process's own backend (it polls) is not counted
            cur.execute("SELECT pg_backend_pid()")
            own = cur.fetchone()[0]
        backends = {pid: common._proc_cpu_seconds(pid) for pid in common.pg_backend_pids(copy)}
        start = dict(backends)
        cpu0 = workers.cpu()
        busy0, idle0 = common._system_busy_idle()
        t0, sent = time.perf_counter(), time.time()
        assert runs.send(run.pk), "the broker refused the run"
        while True:
            for pid in common.pg_backend_pids(copy, monitor):
                backends[pid] = max(backends.get(pid, 0.0), common._proc_cpu_seconds(pid))
            state = TaskRun.objects.values_list("state", flat=True).get(pk=run.pk)
            if state in ("succeeded", "failed"):
                break
            if time.perf_counter() - t0 > 900:
                raise RuntimeError("the sweep did not finish within 900 s")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        busy1, idle1 = common._system_busy_idle()
        worker_cpu = workers.cpu() - cpu0
        pg_cpu = sum(v - start.get(pid, 0.0) for pid, v in backends.items() if pid != own)
        run.refresh_from_db()
        if run.state != "succeeded":
            raise RuntimeError(f"the sweep failed: {run.error}")
        chunks = sorted(
            run.chunks.values_list("started_at", "finished_at", "hostname"), key=lambda c: c[0]
        )
        # The run's own steps around its chunks: planning before the first one starts, the
        # merge after the last one ends. Each worker runs one chunk at a time (solo pool), so
        # its chunks in start order are back to back but for the gaps between them.
        gaps, host_end = 0.0, {}
        for start_at, end, host in chunks:
            if host in host_end:
                gaps += (start_at - host_end[host]).total_seconds()
            host_end[host] = end
        last_end = max(host_end.values())
        timeline = {
            "start": run.started_at.timestamp() - sent,
            "gaps": gaps / max(1, len(chunks) - len(host_end)),
            "plan": (chunks[0][0] - run.started_at).total_seconds(),
            "merge": (run.finished_at - last_end).total_seconds(),
            "straggle": (last_end - min(host_end.values())).total_seconds(),
            "chunk": sum((end - start_at).total_seconds() for start_at, end, _ in chunks)
            / len(chunks),
        }
        if args.kind == kinds.IGNORED_SWEEP:
            checks = {
                "one IGNORED_CHECK per object":
                    Operation.objects.filter(op_type="IGNORED_CHECK").count() == n,
                "no candidate left": candidates(NAMESPACE).count() == 0,
                "all examined": run.result["examined"] == n,
            }  # fmt: skip
        else:  # a verification, of the chains or of the replays
            checks = {
                "no mismatch": run.result["ok"] and run.result["mismatch_count"] == 0,
                "every object checked": run.result["checked"] >= n,
            }
    finally:
        monitor.close()
        workers.stop()
        switch_database("postgres")
    return {
        "workers": count, "wall": wall, "worker_cpu": worker_cpu, "pg_cpu": pg_cpu,
        "machine_cpu": busy1 - busy0, "machine_share": 100 * (busy1 - busy0) / max(
            1e-9, busy1 - busy0 + idle1 - idle0),
        "chunks": run.result["chunks"], "hosts": len(run.result["workers"]),
        "checks": checks, "timeline": timeline, "result": run.result,
    }  # fmt: skip


def measure_workers(args, n: int) -> bool:
    from django.db import connections

    connections.close_all()
    counts = [1, args.worker_processes] * args.rounds
    rounds = [one_round(args, count, DB, n) for count in counts]
    print()
    common.print_table(
        ["round", "worker processes", "chunks (hosts)", "seconds", "worker CPU s", "PG CPU s",
         "CPU us/object", "machine busy"],
        [
            [str(k + 1), str(r["workers"]), f"{r['chunks']} ({r['hosts']})", f"{r['wall']:.2f}",
             f"{r['worker_cpu']:.1f}", f"{r['pg_cpu']:.1f}",
             f"{1e6 * (r['worker_cpu'] + r['pg_cpu']) / n:.0f}",
             f"{r['machine_cpu']:.1f} s ({r['machine_share']:.0f}%)"]
            for k, r in enumerate(rounds)
        ],
    )  # fmt: skip
    print(
        "# per round: send to the run's start, planning (to the first chunk's start), the mean "
        "gap between a worker's chunks, the last chunk's lead over the host that finished "
        "first, the merge after it, the mean chunk (claim to commit)"
    )
    for k, r in enumerate(rounds):
        t = r["timeline"]
        print(
            f"#   round {k + 1}: start {t['start']:.2f} s, planning {t['plan']:.2f} s, "
            f"gap {1e3 * t['gaps']:.1f} ms, straggle {t['straggle']:.2f} s, "
            f"merge {t['merge']:.2f} s, mean chunk {t['chunk']:.3f} s"
        )
    one = min(r["wall"] for r in rounds if r["workers"] == 1)
    many = min(r["wall"] for r in rounds if r["workers"] == args.worker_processes)
    first = next(r["wall"] for r in rounds if r["workers"] == args.worker_processes)
    sweep = args.kind == "ignored_sweep"  # the targets are the sweep's
    print(
        f"# {args.kind}: speed-up of {args.worker_processes} worker processes over 1 (best "
        f"rounds): {one / many:.2f}x{' (target >= 1.6x)' if sweep else ''}; first run with "
        f"{args.worker_processes}: {first:.2f} s{' (target <= 12 s)' if sweep else ''}"
    )
    ok = True
    for r in rounds:
        for name, passed in r["checks"].items():
            ok = ok and passed
            if not passed:
                print(f"check {name} (round with {r['workers']}): FAILED; result {r['result']}")
    print(f"check every round: {'OK' if ok else 'FAILED'}")
    drop_database(f"{DB}_copy")
    return ok


def main(argv: list[str] | None = None) -> int:
    global DB
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--per-session", type=int, default=10, help="objects per session")
    parser.add_argument("--chunk", type=int, default=500, help="objects per transaction")
    parser.add_argument(
        "--worker-processes",
        type=int,
        default=0,
        help="fan the sweep out over 1 and this many real Celery worker processes",
    )
    parser.add_argument("--chunk-size", type=int, default=1000, help="the run's chunk_size")
    parser.add_argument(
        "--kind",
        default="ignored_sweep",
        choices=("ignored_sweep", "verify_chain", "verify_replay"),
        # not rebuild_aggregates: the rows go in by COPY, so the log has no operation that
        # moves an aggregate (bench_worker.py times the rebuild on a log built by ingestion)
        help="with --worker-processes: the fanned-out run to time on the built database",
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each worker count")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7", help="the broker")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile the first run")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument("--profile-out", help="also write the profile to this file (pstats)")
    parser.add_argument("--phases", action="store_true", help="wall time per step of the run")
    parser.add_argument("--db", type=check_db_name, default=DB, help="scratch database name")
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--reuse-db",
        action="store_true",
        help="run on a copy of the database a --keep-db or --reuse-db run built (same "
        "--objects/--seed/migrations), else build it and keep it",
    )
    parser.add_argument("--wait-quiet", type=float, default=30.0)
    args = parser.parse_args(argv)
    DB = args.db
    common.stop_on_sigterm()
    if not (
        1 <= args.objects <= 1_000_000
        and 1 <= args.per_session <= 100
        and 1 <= args.chunk <= 10_000
        and 0 <= args.worker_processes <= 8
        and 1 <= args.chunk_size <= 100_000
        and 1 <= args.rounds <= 5
    ):
        parser.error(
            "bounded: objects 1-1,000,000, per-session 1-100, chunk 1-10,000, worker processes "
            "0-8, chunk size 1-100,000, rounds 1-5"
        )
    common.wait_for_quiet(args.wait_quiet)
    print(
        f"# sweep benchmark: {args.objects:,} candidate objects, chunks of {args.chunk}, "
        f"PostgreSQL database {DB}"
    )
    return 0 if run(args) else 1


if __name__ == "__main__":
    sys.exit(main())
