"""Dashboard render times at scale: p50/p95 of the main pages with 100k objects and 1M injections.

Builds (or reuses, with ``--reuse``) the scratch PostgreSQL database ``rms_bench_dash`` on
127.0.0.1:5432, fills it with ``COPY`` — objects, 100k feedback sessions of 10 injections each,
their operations (INJECTION_EVENT, FEEDBACK_EVENT, REINFORCE / PENALTY, FEEDBACK_SESSION),
signal records, aggregates, 30 days of metric snapshots every 10 minutes, relationships with
evidence and simulation runs — then runs the retrieval and window rollups as beat would, and
renders each page in-process with Django's test Client as a logged-in admin and prints the
figures.

The rows follow the shapes the services write (states beside state-changing operations,
aggregates consistent with the injections and signals) but not the policy's exact arithmetic
nor valid hash chains: the pages read them, they do not verify them. The real ingest path runs
at about 130 sessions/s on this host, which would take a quarter of an hour for the data set.

    .venv/bin/python bench/bench_dashboard.py [--objects 100000] [--injections 1000000]
                                              [--runs 30] [--reuse] [--db rms_bench_dash]

``--db`` names the scratch database (``rms_bench*``), so two checkouts on one machine do not
rebuild each other's.

The overview caches its metric sums for 60 s (dashboard.selectors.METRICS_CACHE_SECONDS) and
``dashboard.tasks.warm_overview`` recomputes them ahead while someone watches; it is measured
both cold (cache cleared before every request: a first visit) and warm.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DB = "rms_bench_dash"
TARGET_P95_MS = 150.0
NAMESPACES = {"support": 0.60, "travel": 0.20, "devops": 0.15, "billing": 0.05}
INJECTIONS_PER_SESSION = 10
CHUNK_SESSIONS = 5000
SNAPSHOT_EVERY = timedelta(minutes=10)
ZERO = "0" * 64


def psql(*sql: str) -> None:
    for statement in sql:
        subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-qc",
                statement,
            ],
            check=True,
            capture_output=True,
        )


def setup_django():
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DB}"
    os.environ.setdefault("RMS_VAR_DIR", str(ROOT / "var" / "bench"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "rms.settings"
    # A development checkout: the built-in key, unless SECRET_KEY is set (as bench/common.py).
    os.environ.setdefault("RMS_DEVELOPMENT", "true")
    for name in ("DEBUG", "REDIS_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()


# --- building the data ------------------------------------------------------------------------


def copy(model, columns: list[str], rows) -> int:
    """COPY rows (tuples in ``columns`` order; JSON as text, hashes as hex) into ``model``'s
    table; a ``HashField`` column (bytea) gets bytea's ``\\x`` hex input."""
    from django.db import connection

    from rms.store.fields import HashField

    table = connection.ops.quote_name(model._meta.db_table)
    fields = [model._meta.get_field(c) for c in columns]
    cols = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    hashes = [i for i, f in enumerate(fields) if isinstance(f, HashField)]
    n = 0
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as cp,
    ):
        for row in rows:
            if hashes:
                row = list(row)
                for i in hashes:
                    row[i] = "\\x" + row[i]
            cp.write_row(row)
            n += 1
    return n


def snap(conf, sal, boost, count, last, etype, decay, pinned, version) -> str:
    return json.dumps(
        {
            "epistemic_type": etype,
            "decay_profile": decay,
            "confidence": conf,
            "salience_base": sal,
            "condition_state": None,
            "reinforcement_boost": boost,
            "reinforcement_count": count,
            "last_reinforced_at": None if last is None else last.isoformat(),
            "pinned": pinned,
            "evidence_ids": [],
            "version": version,
        }
    )


class Obj:
    __slots__ = (
        "id", "ns", "etype", "decay", "conf", "sal", "boost", "count", "last", "version", "useful",
        "inj", "ref", "corr", "unused", "streak", "last_pos", "last_neg", "gamma", "delta", "uses",
        "last_use", "utility", "unused_sessions", "last_ts", "tokens",
    )  # fmt: skip


def _update_objects(objs) -> None:
    from rms import store
    from rms.models import MemoryObject, new_row

    store.get().update(
        MemoryObject,
        [
            new_row(
                MemoryObject,
                id=o.id,
                confidence=o.conf,
                salience_base=o.sal,
                reinforcement_boost=o.boost,
                reinforcement_count=o.count,
                last_reinforced_at=o.last,
                version=o.version,
                last_op_ts=o.last_ts,
            )
            for o in objs
        ],
        [
            "confidence",
            "salience_base",
            "reinforcement_boost",
            "reinforcement_count",
            "last_reinforced_at",
            "version",
            "last_op_ts",
        ],
    )


def build(n_objects: int, n_injections: int, seed: int = 5) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from feedback import simulations, suite
    from feedback.metrics import DEFAULT_THRESHOLDS
    from feedback.models import (
        FeedbackAggregate,
        FeedbackSession,
        InjectionEvent,
        MetricSnapshot,
        SessionNamespace,
        SignalRecord,
    )
    from rms.models import ApiClient, MemoryObject, Namespace, Operation, Relationship
    from rms.policy import DEFAULT_CONFIDENCE, DEFAULT_DECAY_PROFILE, ceiling_for
    from taskruns.models import TaskRun

    rng = random.Random(seed)
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - timedelta(days=30)
    created = start - timedelta(days=2)
    t0 = time.perf_counter()

    namespaces = {name: Namespace.objects.create(name=name) for name in NAMESPACES}
    user = get_user_model().objects.create_superuser("bench-admin", "b@example.com", "pw")
    writer_user = get_user_model().objects.create(username="bench-writer")
    writer = ApiClient.objects.create(
        user=writer_user, name="bench-writer", role="client", token_hash="0" * 64
    )
    del user

    types = ["OBSERVED", "ASSERTED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED"]
    objs: list[Obj] = []
    by_ns: dict[str, list[Obj]] = {name: [] for name in NAMESPACES}
    names, weights = list(NAMESPACES), list(NAMESPACES.values())
    for i in range(n_objects):
        o = Obj()
        o.id = uuid.UUID(int=rng.getrandbits(128), version=4)
        o.ns = rng.choices(names, weights)[0] if i >= len(names) else names[i]
        o.etype = rng.choice(types)
        o.decay = DEFAULT_DECAY_PROFILE[o.etype]
        o.conf = DEFAULT_CONFIDENCE[o.etype]
        o.sal, o.boost, o.count, o.last, o.version = 0.5, 0.0, 0, None, 1
        o.useful = rng.random() < 0.3
        o.inj = o.ref = o.corr = o.unused = o.streak = o.uses = o.unused_sessions = o.tokens = 0
        o.last_pos = o.last_neg = o.last_use = None
        o.gamma = o.delta = 0.0
        o.utility = 0.5
        o.last_ts = created
        objs.append(o)
        by_ns[o.ns].append(o)

    obj_cols = [
        "id", "namespace", "content", "domain_tags", "epistemic_type", "condition_state",
        "decay_profile", "confidence", "salience_base", "reinforcement_boost", "evidence_ids",
        "pinned", "created_by", "created_by_type", "created_at", "last_reinforced_at",
        "reinforcement_count", "version", "head_hash", "last_op_ts",
    ]  # fmt: skip
    words = ["customer", "prefers", "invoices", "region", "plan", "ticket", "deploy", "backup"]
    copy(
        MemoryObject,
        obj_cols,
        (
            (
                o.id, namespaces[o.ns].pk,
                f"{rng.choice(words).capitalize()} {rng.choice(words)} {k} of {o.ns}: "
                f"{' '.join(rng.choices(words, k=6))}",
                json.dumps([rng.choice(words)]), o.etype, None, o.decay, o.conf, 0.5, 0.0, "[]",
                False, "extractor-1", "AI_AGENT", created, None, 0, 1, ZERO, created,
            )
            for k, o in enumerate(objs)
        ),
    )  # fmt: skip
    op_cols = [
        "id", "ts", "op_type", "target_type", "target_id", "namespace", "actor_id", "actor_type",
        "session_id", "payload", "policy_version", "state", "prev_hash", "hash",
    ]  # fmt: skip
    copy(
        Operation,
        op_cols,
        (
            (
                uuid.uuid4(), created, "OBJECT_CREATED", "memory_object", o.id, o.ns,
                "extractor-1", "AI_AGENT", None,
                json.dumps({"epistemic_type": o.etype, "decay_profile": o.decay,
                            "confidence": o.conf, "salience_base": 0.5, "content": "…"}),
                "confidence_v1",
                snap(o.conf, 0.5, 0.0, 0, None, o.etype, o.decay, False, 1), ZERO,
                uuid.uuid4().hex * 2,
            )
            for o in objs
        ),
    )  # fmt: skip
    print(f"  objects: {n_objects:,} in {time.perf_counter() - t0:.0f} s", flush=True)

    n_sessions = n_injections // INJECTIONS_PER_SESSION
    span = (now - timedelta(minutes=5) - start).total_seconds()
    times = sorted(start + timedelta(seconds=rng.random() * span) for _ in range(n_sessions))
    sess_cols = [
        "id", "client", "request_id", "body_hash", "session_id", "ts", "namespace_scope",
        "context_budget", "tokens_used", "context_text", "context_tags", "outcome", "stored_record",
        "head_hash", "last_op_ts",
    ]  # fmt: skip
    scope_cols = ["session", "namespace", "ts", "context_budget", "has_corrected"]
    inj_cols = [
        "session", "object", "namespace", "ts", "rank_position", "representation_type",
        "token_cost", "composite_score", "str_value", "ended_unused",
    ]  # fmt: skip
    sig_cols = [
        "feedback_session", "object", "namespace", "operation_id", "ts", "session_id",
        "signal_type", "detection_method", "reliability_class", "base_weight",
        "effective_weight", "effect", "reason", "actor_id", "actor_type", "automatic",
    ]  # fmt: skip
    done = 0
    for chunk_start in range(0, n_sessions, CHUNK_SESSIONS):
        sessions, scopes, injections, signals, ops = [], [], [], [], []
        for k in range(chunk_start, min(n_sessions, chunk_start + CHUNK_SESSIONS)):
            ts = times[k]
            ns = rng.choices(names, weights)[0]
            pool = by_ns[ns]
            chosen = rng.sample(pool, min(INJECTIONS_PER_SESSION, len(pool)))
            sid = uuid.uuid4()
            session_id = f"conv-{k // 3}"
            budget = 2048
            corrected = False
            outcome = rng.choices(["SUCCESS", "PARTIAL", "FAILED"], [70, 20, 10])[0]
            sig_out = []
            for rank, o in enumerate(chosen, 1):
                cost = rng.randint(20, 120)
                o.inj += 1
                o.tokens += cost
                o.version += 1
                ops.append(
                    (
                        uuid.uuid4(), ts, "INJECTION_EVENT", "memory_object", o.id, ns,
                        "bench-writer", "SYSTEM_PROCESS", session_id,
                        json.dumps({"session_id": session_id, "feedback_session_id": str(sid),
                                    "object_id": str(o.id), "rank_position": rank,
                                    "token_cost": cost}),
                        "", None, ZERO, uuid.uuid4().hex * 2,
                    )
                )  # fmt: skip
                used = rng.random() < (0.5 if o.useful else 0.03)
                wrong = not used and not o.useful and rng.random() < 0.01
                if used or wrong:
                    kind = "REFERENCED" if used else "CORRECTED"
                    fb_id = uuid.uuid4()
                    fb_hash = uuid.uuid4().hex * 2
                    o.version += 1
                    effect = "reinforced" if used else "penalized"
                    ops.append(
                        (
                            fb_id, ts, "FEEDBACK_EVENT", "memory_object", o.id, ns, "analyser",
                            "SYSTEM_PROCESS", session_id,
                            json.dumps({"signal_type": kind, "effect": effect,
                                        "detection_method": "response_analysis",
                                        "feedback_session_id": str(sid)}),
                            "confidence_v1", None, ZERO, fb_hash,
                        )
                    )  # fmt: skip
                    before, sal_before = o.conf, o.sal
                    ceiling = ceiling_for(o.etype)
                    if used:
                        step = 0.04 * (ceiling - o.conf)
                        o.conf = min(ceiling, o.conf + step)
                        o.sal = min(1.0, o.sal + step / 2)
                        o.boost, o.count, o.last = 0.04, o.count + 1, ts
                        o.ref += 1
                        o.gamma += 0.04
                        o.last_pos = ts
                        o.uses += 1
                        o.last_use = ts
                        o.streak = 0
                        weight = 0.04
                    else:
                        o.conf = max(0.05, o.conf - 0.15)
                        o.sal = max(0.0, o.sal - 0.045)
                        o.corr += 1
                        o.delta += 0.15
                        o.last_neg = ts
                        o.streak = 0
                        corrected = True
                        weight = 0.15
                    o.version += 1
                    ops.append(
                        (
                            uuid.uuid4(), ts, "REINFORCE" if used else "PENALTY",
                            "memory_object", o.id, ns, "analyser", "SYSTEM_PROCESS", session_id,
                            json.dumps({"signal_type": kind,
                                        "detection_method": "response_analysis",
                                        "confidence_before": before,
                                        "confidence_after": o.conf, "salience_before": sal_before,
                                        "salience_after": o.sal}),
                            "confidence_v1",
                            snap(o.conf, o.sal, o.boost, o.count, o.last, o.etype, o.decay,
                                 False, o.version),
                            fb_hash, uuid.uuid4().hex * 2,
                        )
                    )  # fmt: skip
                    signals.append(
                        (
                            sid, o.id, namespaces[ns].pk, fb_id, ts, session_id, kind,
                            "response_analysis", "LOW", 0.08 if used else 0.15, weight, effect,
                            "", "analyser", "SYSTEM_PROCESS", False,
                        )
                    )  # fmt: skip
                    sig_out.append({"signal_type": kind, "object_id": str(o.id)})
                    ended_unused = False
                else:
                    o.version += 1
                    o.unused += 1
                    o.streak += 1
                    o.unused_sessions += 1
                    ops.append(
                        (
                            uuid.uuid4(), ts, "FEEDBACK_EVENT", "memory_object", o.id, ns,
                            "bench-writer", "SYSTEM_PROCESS", session_id,
                            json.dumps({"signal_type": "UNUSED", "effect": "unused",
                                        "detection_method": "injection_tracking"}),
                            "confidence_v1", None, ZERO, uuid.uuid4().hex * 2,
                        )
                    )  # fmt: skip
                    ended_unused = True
                o.last_ts = ts
                injections.append(
                    (
                        sid, o.id, namespaces[ns].pk, ts, rank, "STRUCTURED", cost,
                        round(rng.uniform(0.3, 0.9), 3), None, ended_unused,
                    )
                )  # fmt: skip
            record = {
                "id": str(sid), "session_id": session_id, "request_id": f"r-{k}",
                "ts": ts.isoformat(), "namespace_scope": [ns], "context_budget": budget,
                "tokens_used": 1200, "outcome": outcome,
                "injected_object_ids": [str(o.id) for o in chosen], "signals": sig_out,
                "unused_ids": [], "session_str_mean": 0.01,
            }  # fmt: skip
            sessions.append(
                (
                    sid, writer.pk, f"r-{k}", ZERO, session_id, ts, json.dumps([ns]), budget,
                    1200, "question about " + rng.choice(words), "[]", outcome,
                    json.dumps(record), ZERO, ts,
                )
            )  # fmt: skip
            scopes.append((sid, namespaces[ns].pk, ts, budget, corrected))
            ops.append(
                (
                    uuid.uuid4(), ts, "FEEDBACK_SESSION", "feedback_session", sid, ns,
                    "bench-writer", "SYSTEM_PROCESS", session_id, "{}", "confidence_v1", None,
                    ZERO, uuid.uuid4().hex * 2,
                )
            )  # fmt: skip
        copy(FeedbackSession, sess_cols, sessions)
        copy(SessionNamespace, scope_cols, scopes)
        copy(InjectionEvent, inj_cols, injections)
        copy(SignalRecord, sig_cols, signals)
        copy(Operation, op_cols, ops)
        done += len(sessions)
        if done % 20000 == 0 or done == n_sessions:
            print(
                f"  sessions: {done:,}/{n_sessions:,} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )

    with transaction.atomic():  # the temporary table of store.update lives until the commit
        _update_objects(objs)
    agg_cols = [
        "object", "namespace", "total_injections", "total_referenced", "total_confirmed",
        "total_task_completed", "total_corrected", "total_unused", "usage_ratio",
        "last_positive_signal", "last_negative_signal", "lifetime_gamma_applied",
        "lifetime_delta_applied", "unused_streak", "utility", "uses", "last_use_at",
        "unused_sessions", "checked_unused_sessions", "total_token_cost",
    ]  # fmt: skip
    copy(
        FeedbackAggregate,
        agg_cols,
        (
            (
                o.id, namespaces[o.ns].pk, o.inj, o.ref, 0, 0, o.corr, o.unused,
                min(1.0, o.ref / o.inj) if o.inj else None, o.last_pos, o.last_neg, o.gamma,
                o.delta, o.streak, o.utility, o.uses, o.last_use, o.unused_sessions, 0, o.tokens,
            )
            for o in objs
            if o.inj or o.corr
        ),
    )  # fmt: skip
    print(f"  aggregates and object states ({time.perf_counter() - t0:.0f} s)", flush=True)

    # 30 days of snapshots every 10 minutes per namespace (the beat task's 24 h window).
    snaps = []
    for ns in namespaces.values():
        t = start
        phase = rng.random() * 6
        while t <= now:
            wave = math.sin(phase + (t - start).total_seconds() / 86400)
            values = {
                "mean_usage_ratio": 0.17 + 0.04 * wave,
                "high_correction_rate": 0.08 + 0.03 * wave,
                "budget_waste_ratio": 0.25 + 0.05 * wave,
                "unused_injection_rate": 0.78 + 0.02 * wave,
            }
            metrics = {}
            for name, value in values.items():
                threshold = DEFAULT_THRESHOLDS[name]
                below = name == "mean_usage_ratio"
                alert = value < threshold if below else value > threshold
                metrics[name] = {
                    "value": value,
                    "threshold": threshold,
                    "direction": "below" if below else "above",
                    "state": "alert" if alert else "ok",
                }
            snaps.append((ns.pk, t, 24, json.dumps(metrics), "[]"))
            t += SNAPSHOT_EVERY
    copy(MetricSnapshot, ["namespace", "ts", "window_hours", "metrics", "warnings"], snaps)

    # Relationships with evidence in every namespace, for the evidence page.
    contexts = ["AUTHORITATIVE", "EXPLICIT", "INFERRED", "SPECULATIVE"]
    priors = {"AUTHORITATIVE": 1.0, "EXPLICIT": 0.9, "INFERRED": 0.6, "SPECULATIVE": 0.3}
    rel_rows, ev_ops = [], []
    seen = set()
    for ns, pool in by_ns.items():
        for _ in range(min(2000, len(pool))):
            a, b = rng.sample(pool, 2)
            if (a.id, b.id) in seen:
                continue
            seen.add((a.id, b.id))
            ctx = rng.choice(contexts)
            m = priors[ctx]
            alpha, beta = 10 * m, 10 * (1 - m)
            rid = uuid.uuid4()
            for _ in range(rng.randint(0, 4)):
                kind = "corroborate" if rng.random() < 0.5 + m / 3 else "contradict"
                prov = rng.choice(["external", "user", "self"])
                ev_ops.append(
                    (
                        uuid.uuid4(), now - timedelta(days=1), "EDGE_EVIDENCE", "relationship",
                        rid, ns, "bench-writer", "SYSTEM_PROCESS", None,
                        json.dumps({"kind": kind, "provenance": prov}), "beta_binomial_v1",
                        None, ZERO, uuid.uuid4().hex * 2,
                    )
                )  # fmt: skip
            rel_rows.append(
                (
                    rid, namespaces[ns].pk, a.id, b.id, "related_to", ctx, alpha, beta, 0, 0,
                    "bench-writer", now - timedelta(days=2), None, 1, ZERO,
                    now - timedelta(days=2),
                )
            )  # fmt: skip
    copy(
        Relationship,
        [
            "id", "namespace", "source", "target", "relation", "extraction_context", "alpha",
            "beta", "corroborations", "contradictions", "created_by", "created_at",
            "last_corroborated_at", "version", "head_hash", "last_op_ts",
        ],
        rel_rows,
    )  # fmt: skip
    copy(Operation, op_cols, ev_ops)

    for seed_ in range(6):
        TaskRun.objects.create(
            kind="stability_simulation",
            params={"seed": seed_},
            state="succeeded",
            progress=1.0,
            result=simulations.stability_simulation(seed_),
            created_by="bench",
        )
        TaskRun.objects.create(
            kind="precision_simulation",
            params={"seed": seed_},
            state="succeeded",
            progress=1.0,
            result=simulations.precision_simulation(seed_),
            created_by="bench",
        )
    TaskRun.objects.create(
        kind="benchmark_suite",
        params={"seed": 42},
        state="succeeded",
        progress=1.0,
        result=suite.benchmark_suite(42),
        created_by="bench",
    )
    for _ in range(200):
        TaskRun.objects.create(
            kind="verify_chain",
            state="succeeded",
            progress=1.0,
            result={"ok": True, "checked": n_objects, "mismatch_count": 0, "mismatches": []},
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    print(f"  built in {time.perf_counter() - t0:.0f} s", flush=True)


# --- measuring -------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (from /proc; clock ticks of 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(runs: int) -> list[tuple[str, float, float, int, float]]:
    from django.contrib.auth import get_user_model
    from django.core.cache import cache
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from feedback.models import FeedbackAggregate, FeedbackSession, SessionNamespace

    c = Client()
    c.force_login(get_user_model().objects.get(username="bench-admin"))
    busy = (
        FeedbackAggregate.objects.filter(namespace__name="support")
        .order_by("-total_injections")
        .values_list("object_id", flat=True)
        .first()
    )
    scope = SessionNamespace.objects.filter(namespace__name="support").order_by("-ts").first()
    session = FeedbackSession.objects.get(pk=scope.session_id)
    as_of = (session.ts - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%S")
    pages = [
        ("overview (24h, cold)", "/?namespace=support", True),
        ("overview (24h, warm)", "/?namespace=support", False),
        ("overview (7d, cold)", "/?namespace=support&window=7d", True),
        ("overview (7d, warm)", "/?namespace=support&window=7d", False),
        ("overview (all, cold)", "/?namespace=support&window=all", True),
        ("overview (all, warm)", "/?namespace=support&window=all", False),
        ("review queue", "/review/?namespace=support", False),
        ("review queue by tokens", "/review/?namespace=support&sort=tokens&dir=desc", False),
        ("review queue page 20", "/review/?namespace=support&page=20", False),
        ("object", f"/objects/{busy}/", False),
        ("object as of", f"/objects/{busy}/?as_of={as_of}", False),
        ("sessions", "/sessions/?namespace=support", False),
        ("sessions page 500", "/sessions/?namespace=support&page=500", False),
        ("session", f"/sessions/{session.pk}/", False),
        ("tasks", "/tasks/", False),
        ("simulations", "/simulations/", False),
        ("evidence", "/evidence/?namespace=support", True),
        ("objects browser", "/objects/?namespace=support", False),
        (
            "objects browser by injections",
            "/objects/?namespace=support&sort=injections&dir=desc",
            False,
        ),
        ("objects browser, text search", "/objects/?namespace=support&q=refund", False),
        ("retrieval (14 days, cold)", "/retrieval/?namespace=support", True),
        ("alerts", "/alerts/", False),
        ("erasures", "/erasures/", False),
        ("retention", "/retention/", False),
    ]
    out = []
    for label, path, cold in pages:
        cache.clear()
        for _ in range(2):
            assert c.get(path).status_code == 200, path
        # CPU per request, this process and its PostgreSQL backend, over all the runs: the
        # figure the machine's other load does not inflate the way it does wall time (the
        # overview's second connection is not counted).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        cpu0, pg0 = time.process_time(), _cpu_seconds(backend)
        times = []
        for _ in range(runs):
            if cold:
                cache.clear()
            started = time.perf_counter()
            response = c.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200
        cpu_ms = (time.process_time() - cpu0 + _cpu_seconds(backend) - pg0) * 1000 / runs
        if cold:
            cache.clear()
        with CaptureQueriesContext(connection) as ctx:
            c.get(path)
        out.append((label, pct(times, 0.5), pct(times, 0.95), len(ctx.captured_queries), cpu_ms))
    return out


def main() -> None:
    global DB
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--injections", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--reuse", action="store_true", help="keep an existing database")
    parser.add_argument("--db", default=DB, help="scratch database (rms_bench*)")
    args = parser.parse_args()
    if not (args.db.startswith("rms_bench") and args.db.replace("_", "").isalnum()):
        parser.error("--db: benchmark databases are rms_bench*")
    DB = args.db

    exists = (
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-Atc",
             f"SELECT 1 FROM pg_database WHERE datname = '{DB}'"],
            capture_output=True, text=True, check=True,
        ).stdout.strip() == "1"
    )  # fmt: skip
    fresh = not (args.reuse and exists)
    if fresh:
        psql(f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}")
    setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from rms.models import MemoryObject

    if fresh or not MemoryObject.objects.exists():
        print(f"building {args.objects:,} objects and {args.injections:,} injections in {DB}")
        build(args.objects, args.injections)
    from django.db import connection
    from django.utils import timezone

    from feedback import retrieval_rollup

    # The retrieval rollup, as beat's `retrieval-rollup` keeps it (idempotent: a
    # reused database only rolls up what is new); the retrieval card and page read it.
    t0 = time.perf_counter()
    rolled = retrieval_rollup.rollup_all(timezone.now())["rows"]
    print(f"# retrieval rollup: {rolled} day and hour rows in {time.perf_counter() - t0:.1f} s")
    from feedback import window_rollup

    # The hourly metric sums, as beat's `window-rollup` keeps them (idempotent as well); the
    # overview's windowed metrics read them.
    t0 = time.perf_counter()
    rolled = window_rollup.rollup_all(timezone.now())["rows"]
    print(f"# window rollup: {rolled} hour rows in {time.perf_counter() - t0:.1f} s")

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM rms_memoryobject), "
            "(SELECT count(*) FROM feedback_injectionevent), "
            "(SELECT count(*) FROM rms_operation), (SELECT count(*) FROM feedback_feedbacksession)"
        )
        n_obj, n_inj, n_ops, n_sess = cursor.fetchone()
    print(
        f"\ndata: {n_obj:,} objects, {n_inj:,} injections, {n_ops:,} operations, "
        f"{n_sess:,} sessions; {args.runs} runs per page, in-process test Client, logged in\n"
    )
    print(f"# load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8} {'CPU ms':>8}")
    worst = 0.0
    for label, p50, p95, queries, cpu_ms in measure(args.runs):
        flag = "" if p95 <= TARGET_P95_MS else "  > target"
        print(f"{label:<28} {p50:>8.1f} {p95:>8.1f} {queries:>8} {cpu_ms:>8.1f}{flag}")
        worst = max(worst, p95)
    print(f"\nworst p95 {worst:.1f} ms (target ≤ {TARGET_P95_MS:.0f} ms)")


if __name__ == "__main__":
    main()
