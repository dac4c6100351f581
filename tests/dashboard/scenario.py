"""A realistic data set for the dashboard, written through the services like real traffic.

Three namespaces with different health (support is fine, travel wastes budget, devops is mostly
ignored), 30 days of feedback sessions, relationships with evidence, pins and deprecations,
hourly metric snapshots computed by the real selector, and task runs holding real simulation
results. ``small=True`` is quick enough for view tests; the full size is for screenshots.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from feedback import ingest, simulations, suite
from feedback.api.views import session_item
from feedback.models import MetricSnapshot
from feedback.selectors import namespace_metrics
from rms import edges, policy, services
from rms.models import ApiClient, MemoryObject, Namespace
from rms.services import Actor
from taskruns.models import TaskRun
from tests.factories import make_client

CONTENT = {
    "support": [
        ("Alice prefers answers with Python examples", ["alice", "python"]),
        ("Bob is on the Enterprise plan since March", ["bob", "billing"]),
        ("Carol wants invoices sent to finance@carol.example", ["carol", "billing"]),
        ("Dmitri reported the CSV export bug in ticket #4821", ["dmitri", "export"]),
        ("Erin's workspace is hosted in the EU data region", ["erin", "region"]),
        ("Farah asked not to be contacted by phone", ["farah", "contact"]),
        ("Gus runs version 3.2 of the desktop client on Windows", ["gus", "desktop"]),
        ("Hana prefers replies in Japanese", ["hana", "language"]),
        ("Ivan's team uses SSO through Okta", ["ivan", "sso"]),
        ("Jade's API key was rotated on 2026-10-02", ["jade", "api"]),
        ("Kofi needs VAT shown on every invoice", ["kofi", "billing"]),
        ("Lena's account has 14 seats", ["lena", "billing"]),
    ],
    "travel": [
        ("The traveller prefers aisle seats on long-haul flights", ["seat", "flight"]),
        ("The traveller is vegetarian", ["meal", "diet"]),
        ("The traveller has a Star Alliance Gold card", ["loyalty", "flight"]),
        ("The traveller avoids layovers shorter than 90 minutes", ["layover", "flight"]),
        ("The traveller books hotels near the city centre", ["hotel"]),
        ("The traveller travels with a folding bicycle", ["luggage"]),
        ("The traveller's passport expires in June 2027", ["passport"]),
        ("The traveller flies out of Lisbon", ["airport", "flight"]),
    ],
    "devops": [
        ("The primary database runs PostgreSQL 15 on db-01", ["postgres", "db"]),
        ("Deploys happen on weekdays before 16:00 UTC", ["deploy", "policy"]),
        ("The staging cluster has 3 nodes in eu-west-1", ["staging", "k8s"]),
        ("The on-call rota changes every Monday at 09:00", ["oncall"]),
        ("The API gateway rate-limits at 600 requests per minute", ["gateway", "limits"]),
        ("Backups are kept for 35 days", ["backup", "policy"]),
        ("Grafana alerts page the #ops-alerts channel", ["alerts"]),
        ("The build cache lives in bucket ci-cache-prod", ["ci"]),
    ],
}
TYPES = [
    "OBSERVED",
    "ASSERTED",
    "ASSERTED",
    "INFERRED",
    "HYPOTHETICAL",
    "CONDITIONAL",
    "UNVERIFIED",
]
#: Per namespace: share of useful objects, how often a useful one is used, how often a useless
#: one is corrected, the context budget and the token cost range of an injection. Support is
#: healthy, travel wastes its budget, devops is mostly ignored and often corrected.
PROFILE = {
    "support": (0.75, 0.7, 0.015, 2048, (18, 90)),
    "travel": (0.55, 0.8, 0.02, 900, (60, 180)),
    "devops": (0.35, 0.25, 0.07, 2048, (18, 90)),
}


@dataclass
class Scenario:
    namespaces: dict[str, Namespace] = field(default_factory=dict)
    clients: dict[str, ApiClient] = field(default_factory=dict)
    objects: dict[str, list[MemoryObject]] = field(default_factory=dict)
    runs: dict[str, TaskRun] = field(default_factory=dict)


def user(username: str, role: str | None, namespaces=(), password: str = "pw-dashboard-1"):
    """A dashboard login: an ApiClient with ``role`` (or a bare user when role is None)."""
    if role is None:
        u = get_user_model().objects.create(username=username)
    else:
        client, _ = make_client(username, role, list(namespaces))
        u = client.user
    u.set_password(password)
    u.save()
    return u


def _record(client, batch) -> None:
    for status, body in ingest.record_sessions(client=client, items=batch):
        assert status == 201, body


def _session_body(rng, ns, objs, n, ts, useful):
    _, quality, correct_p, budget, (lo, hi) = PROFILE[ns]
    k = min(len(objs), rng.randint(4, 8))
    chosen = rng.sample(objs, k)
    injections, signals = [], []
    for rank, obj in enumerate(chosen, 1):
        cost = rng.randint(lo, hi)
        injections.append(
            {
                "object_id": str(obj.pk),
                "rank_position": rank,
                "representation_type": "STRUCTURED" if rank % 3 else "SUMMARY",
                "token_cost": cost,
                "composite_score": round(rng.uniform(0.3, 0.95), 3),
            }
        )
        used = rng.random() < (quality if obj.pk in useful else 0.04)
        if used:
            kind = rng.choices(["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH"], [60, 25, 15])[0]
            signals.append(
                {
                    "object_id": str(obj.pk),
                    "signal_type": kind,
                    "detection_method": {
                        "REFERENCED": "response_analysis",
                        "CONFIRMED": "explicit_user",
                        "TASK_COMPLETED_WITH": "tool_validation",
                    }[kind],
                    "actor_id": "user-7" if kind == "CONFIRMED" else "analyser",
                    "actor_type": "HUMAN_USER" if kind == "CONFIRMED" else "SYSTEM_PROCESS",
                }
            )
        elif obj.pk not in useful and rng.random() < correct_p:
            signals.append(
                {
                    "object_id": str(obj.pk),
                    "signal_type": "CORRECTED",
                    "detection_method": "explicit_user",
                    "actor_id": "user-7",
                    "actor_type": "HUMAN_USER",
                }
            )
    tags = sorted({t for obj in chosen[:2] for t in obj.domain_tags})
    return {
        "session_id": f"conv-{ns}-{n // 2}",
        "request_id": f"req-{ns}-{n}",
        "namespace_scope": [ns],
        "context_budget": budget,
        "tokens_used": rng.randint(budget // 3, budget - 100),
        "context_text": "question about " + " and ".join(tags[:2]),
        "context_tags": tags,
        "outcome": rng.choices(["SUCCESS", "PARTIAL", "FAILED"], [70, 20, 10])[0],
        "ts": ts.isoformat(),
        "injections": injections,
        "signals": signals,
    }


def build(
    *,
    small: bool = False,
    seed: int = 11,
    snapshots: bool = True,
    tasks: bool = True,
) -> Scenario:
    rng = random.Random(seed)
    now = timezone.now()
    start = now - timedelta(days=30)
    sc = Scenario()
    per_ns_objects = 14 if small else 120
    per_ns_sessions = 40 if small else 420
    for ns_name, subjects in CONTENT.items():
        ns = Namespace.objects.get_or_create(name=ns_name)[0]
        sc.namespaces[ns_name] = ns
        client, _ = make_client(f"ingest-{ns_name}", "client", [ns_name])
        sc.clients[ns_name] = client
        items = []
        for i in range(per_ns_objects):
            content, tags = subjects[i % len(subjects)]
            if i >= len(subjects):
                content = f"{content} (variant {i // len(subjects)})"
            etype = TYPES[rng.randrange(len(TYPES))]
            items.append(
                {
                    "namespace": ns_name,
                    "content": content,
                    "domain_tags": tags,
                    "epistemic_type": etype,
                    "condition_state": "TRUE" if etype == "CONDITIONAL" else None,
                    "evidence_ids": [f"doc-{rng.randint(1, 400)}"],
                    "actor_id": "extractor-1",
                    "actor_type": "AI_AGENT",
                    "ts": start - timedelta(days=3, minutes=i),
                }
            )
        objs = services.object_create(client=client, items=items)
        sc.objects[ns_name] = objs
        share = PROFILE[ns_name][0]
        useful = {o.pk for o in objs if rng.random() < share}
        times = sorted(
            start + timedelta(seconds=rng.uniform(0, 30 * 86400 - 600))
            for _ in range(per_ns_sessions)
        )
        batch = []
        for n, ts in enumerate(times):
            batch.append(session_item(_session_body(rng, ns_name, objs, n, ts, useful)))
            if len(batch) == 100:
                _record(client, batch)
                batch = []
        if batch:
            _record(client, batch)

    admin = ApiClient(name="scenario-admin", role="admin")
    actor = Actor("maria.ops", "HUMAN_USER")
    support = sc.objects["support"]
    services.object_pin(
        client=admin,
        object_id=support[0].pk,
        reason="Confirmed with Alice in the onboarding call",
        confidence=policy.pin_limit(support[0].epistemic_type),
        actor=actor,
    )
    services.object_transition(
        client=admin,
        object_id=sc.objects["devops"][3].pk,
        to="DEPRECATED",
        reason="Rota moved to Tuesdays",
        actor=actor,
    )

    # Relationships with evidence, so the object page and the calibration chart have data.
    contexts = ["AUTHORITATIVE", "EXPLICIT", "INFERRED", "SPECULATIVE"]
    truth = {"AUTHORITATIVE": 0.93, "EXPLICIT": 0.82, "INFERRED": 0.66, "SPECULATIVE": 0.42}
    for ns_name, objs in sc.objects.items():
        client = sc.clients[ns_name]
        pairs = set()
        for _ in range(6 if small else 40):
            a, b = rng.sample(range(len(objs)), 2)
            if (a, b) in pairs:
                continue
            pairs.add((a, b))
            ctx = contexts[rng.randrange(4)]
            rel = edges.relationship_create(
                client=client,
                source=objs[a].pk,
                target=objs[b].pk,
                relation=rng.choice(["implies", "related_to", "supersedes", "same_customer"]),
                extraction_context=ctx,
            )
            for _ in range(rng.randint(0, 5)):
                edges.relationship_evidence(
                    client=client,
                    relationship_id=rel.pk,
                    kind="corroborate" if rng.random() < truth[ctx] else "contradict",
                    provenance=rng.choice(["external", "user", "user", "self"]),
                )

    if snapshots:
        _snapshots(sc, now, hours=24 if small else 24 * 30, step=6 if small else 2)
    if tasks:
        _task_runs(sc, now, small=small)
    return sc


def _snapshots(sc: Scenario, now, *, hours: int, step: int) -> None:
    rows = []
    for ns in sc.namespaces.values():
        for h in range(hours, -1, -step):
            until = (now - timedelta(hours=h)).replace(second=0, microsecond=0)
            evaluated = namespace_metrics(ns, until - timedelta(hours=24), until)
            rows.append(
                MetricSnapshot(
                    namespace=ns,
                    ts=until,
                    window_hours=24,
                    metrics=evaluated["metrics"],
                    warnings=evaluated["warnings"],
                )
            )
    MetricSnapshot.objects.bulk_create(rows, ignore_conflicts=True)


def _task_runs(sc: Scenario, now, *, small: bool) -> None:
    from feedback.sweep import sweep
    from rms import verification

    def run(
        kind, params, result=None, state=TaskRun.SUCCEEDED, minutes=0, error="", by="maria.ops"
    ):
        started = now - timedelta(minutes=minutes)
        r = TaskRun.objects.create(
            kind=kind,
            params=params,
            state=state,
            progress=1.0 if state in (TaskRun.SUCCEEDED, TaskRun.FAILED) else 0.42,
            result=result,
            error=error,
            created_by=by,
            started_at=started,
            finished_at=started + timedelta(seconds=7) if state != TaskRun.RUNNING else None,
        )
        TaskRun.objects.filter(pk=r.pk).update(created_at=started)
        r.refresh_from_db()
        sc.runs[f"{kind}:{params.get('seed', '')}:{state}"] = r
        return r

    sessions = 40 if small else 100
    run(
        "stability_simulation",
        {"seed": 7},
        simulations.stability_simulation(7, sessions=sessions),
        minutes=600,
    )
    run(
        "stability_simulation",
        {"seed": 42},
        simulations.stability_simulation(42, sessions=sessions),
        minutes=300,
    )
    run("precision_simulation", {"seed": 3}, simulations.precision_simulation(3), minutes=280)
    run("precision_simulation", {"seed": 42}, simulations.precision_simulation(42), minutes=270)
    run("benchmark_suite", {"seed": 42}, suite.benchmark_suite(42), minutes=260)
    run("verify_replay", {}, verification.verify_replay_all(), minutes=200)
    run("verify_chain", {}, verification.verify_chain_all(), minutes=190)
    run("ignored_sweep", {}, sweep(), minutes=120, by="beat")
    run(
        "rebuild_aggregates",
        {"namespace": "travel"},
        state=TaskRun.FAILED,
        error="Database error after 4 attempts: could not serialize access",
        minutes=60,
    )
    run("precision_simulation", {"seed": 99, "sessions": 200}, state=TaskRun.RUNNING, minutes=1)


def object_id(obj) -> str:
    return str(obj.pk if not isinstance(obj, uuid.UUID) else obj)
