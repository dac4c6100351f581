"""``seed_demo``: a realistic, living demo data set, written through the services like real
traffic (so the operation log, aggregates, metrics and charts are all genuine).

Deterministic (``--seed``). Three namespaces in different health, 30 days of feedback sessions in
time order, relationships with evidence, metric snapshots for the trend charts, and finished
simulation runs:

- ``support``: a well-curated store; every metric ok.
- ``travel``: an extractor that gets facts wrong: the correction rate alerts.
- ``devops``: bloated retrieval: most injections go unused and waste the budget.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from feedback import alerts, ingest, simulations, suite
from feedback.api.fastpath import validate_session
from feedback.models import MetricSnapshot
from feedback.selectors import namespace_metrics
from rms import edges, policy, services
from rms.api.auth import new_token, token_digest
from rms.models import ApiClient, Namespace
from taskruns.models import TaskRun

FACTS = {
    "support": {
        "people": [
            "Alice",
            "Bob",
            "Carol",
            "Dmitri",
            "Erin",
            "Farah",
            "Gus",
            "Hana",
            "Ivan",
            "Jia",
            "Kofi",
            "Lena",
            "Mateo",
            "Nora",
            "Omar",
            "Priya",
        ],
        "templates": [
            ("{p} prefers answers with Python examples", ["python", "style"]),
            ("{p} is on the {plan} plan", ["billing", "plan"]),
            ("{p} wants invoices sent to finance@{lp}.example", ["billing", "invoice"]),
            ("{p} reported the CSV export bug in ticket #{n}", ["export", "bug"]),
            ("{p}'s workspace is hosted in the {region} region", ["region", "hosting"]),
            ("{p} asked not to be contacted by phone", ["contact"]),
            ("{p} runs version 3.{m} of the desktop client", ["desktop", "version"]),
            ("{p} prefers replies in {lang}", ["language"]),
            ("{p} uses single sign-on through {idp}", ["sso", "auth"]),
            ("{p}'s team has {n} seats", ["billing", "seats"]),
        ],
    },
    "travel": {
        "people": ["the traveller", "Sam", "Rita", "Yusuf", "Mei", "Jonas", "Ana", "Theo"],
        "templates": [
            ("{p} prefers aisle seats on flights longer than {m} hours", ["flight", "seat"]),
            ("{p} is vegetarian", ["meal", "diet"]),
            ("{p} holds a Star Alliance Gold card", ["loyalty", "flight"]),
            ("{p} avoids layovers shorter than {n} minutes", ["layover", "flight"]),
            ("{p} books hotels near the city centre of {city}", ["hotel", "city"]),
            ("{p} travels with a folding bicycle", ["luggage"]),
            ("{p}'s passport expires in {year}", ["passport", "documents"]),
            ("{p} prefers trains over flights under {m} hours", ["train", "preference"]),
        ],
    },
    "devops": {
        "people": [
            "the primary database",
            "the staging cluster",
            "the API gateway",
            "the on-call rota",
            "the backup job",
            "the CI pipeline",
            "the cache tier",
            "the search cluster",
        ],
        "templates": [
            ("{p} runs PostgreSQL {m}.{n} on db-{n}", ["postgres", "db"]),
            ("{p} deploys only on weekdays before 16:00 UTC", ["deploy", "policy"]),
            ("{p} has {m} nodes in {region}", ["k8s", "capacity"]),
            ("{p} rate-limits at {n}0 requests per minute", ["limits"]),
            ("{p} keeps backups for {n} days", ["backup", "policy"]),
            ("{p} pages the on-call engineer after {m} failed checks", ["alerting"]),
            ("{p} uses TLS certificates issued by {idp}", ["tls", "security"]),
        ],
    },
}
FILL = {
    "plan": ["Enterprise", "Team", "Starter"],
    "region": ["EU", "US-East", "APAC"],
    "lang": ["Japanese", "German", "Spanish"],
    "idp": ["Okta", "Azure AD", "Google"],
    "city": ["Lisbon", "Kyoto", "Berlin", "Montreal"],
}
TYPES = [
    "OBSERVED",
    "ASSERTED",
    "ASSERTED",
    "ASSERTED",
    "INFERRED",
    "INFERRED",
    "HYPOTHETICAL",
    "CONDITIONAL",
    "UNVERIFIED",
]
# per namespace: share of useful objects, of wrong objects, injections per session, budget
PROFILE = {
    "support": (0.75, 0.008, (4, 7), 4096),
    "travel": (0.62, 0.12, (4, 7), 4096),
    "devops": (0.12, 0.004, (8, 12), 2048),
}


def content(rng: random.Random, ns: str) -> tuple[str, list[str]]:
    spec = FACTS[ns]
    template, tags = rng.choice(spec["templates"])
    person = rng.choice(spec["people"])
    values = {k: rng.choice(v) for k, v in FILL.items()}
    text = template.format(
        p=person,
        lp=person.lower().split()[-1],
        n=rng.randint(2, 90),
        m=rng.randint(2, 9),
        year=rng.randint(2027, 2034),
        **values,
    )
    return text[0].upper() + text[1:], [*tags, person.split()[-1].lower()]


class Command(BaseCommand):
    help = "Load a realistic demo data set (namespaces, objects, 30 days of feedback sessions)."

    def add_arguments(self, parser):
        parser.add_argument("--objects", type=int, default=900, help="Objects per namespace.")
        parser.add_argument("--sessions", type=int, default=1500, help="Sessions per namespace.")
        parser.add_argument("--seed", type=int, default=7)

    def handle(self, *args, objects: int, sessions: int, seed: int, **options):
        rng = random.Random(seed)
        now = timezone.now().replace(microsecond=0)
        start = now - timedelta(days=30)
        for ns_name in FACTS:
            self._namespace(rng, ns_name, objects, sessions, start, now)
        self._simulations()
        self.stdout.write(self.style.SUCCESS("Demo data loaded."))

    def _namespace(self, rng, ns_name, n_objects, n_sessions, start, now):
        ns, _ = Namespace.objects.get_or_create(name=ns_name)
        client = self._client(f"demo-{ns_name}", ns)
        useful_share, wrong_share, (lo, hi), budget = PROFILE[ns_name]
        items = []
        for i in range(n_objects):
            text, tags = content(rng, ns_name)
            items.append(
                {
                    "namespace": ns_name,
                    "content": text,
                    "domain_tags": tags,
                    "epistemic_type": rng.choice(TYPES),
                    "evidence_ids": [f"doc-{rng.randint(1, 500)}"],
                    "actor_id": "extractor-1",
                    "actor_type": "AI_AGENT",
                    "ts": start + timedelta(seconds=i),
                }
            )
        created = services.object_create(client=client, items=items)
        ids = [str(o.pk) for o in created]
        roll = {oid: rng.random() for oid in ids}
        useful = {oid for oid in ids if roll[oid] < useful_share}
        wrong = {oid for oid in ids if useful_share <= roll[oid] < useful_share + wrong_share}
        # Retrieval favours some objects: a Zipf-like popularity, so usage ratios spread out.
        weights = [1.0 / (1 + (k % 97)) for k in range(len(ids))]
        span = (now - start - timedelta(hours=2)).total_seconds()
        times = sorted(
            start + timedelta(hours=1, seconds=rng.uniform(0, span)) for _ in range(n_sessions)
        )
        batch: list[ingest.Item] = []
        for n, ts in enumerate(times):
            injected = list(dict.fromkeys(rng.choices(ids, weights, k=rng.randint(lo, hi))))
            signals = []
            for oid in injected:
                if oid in useful and rng.random() < 0.75:
                    kind = rng.choices(
                        [policy.REFERENCED, policy.CONFIRMED, policy.TASK_COMPLETED_WITH],
                        [60, 25, 15],
                    )[0]
                    method = "response_analysis" if kind == policy.REFERENCED else None
                    signals.append(
                        {
                            "object_id": oid,
                            "signal_type": kind,
                            **({"detection_method": method} if method else {}),
                            "actor_id": "user-1" if kind == policy.CONFIRMED else "analyser",
                            "actor_type": "HUMAN_USER"
                            if kind == policy.CONFIRMED
                            else "SYSTEM_PROCESS",
                        }
                    )
                elif oid in wrong and rng.random() < 0.6:
                    signals.append(
                        {
                            "object_id": oid,
                            "signal_type": policy.CORRECTED,
                            "actor_id": "user-1",
                            "actor_type": "HUMAN_USER",
                        }
                    )
            used = sum(s["signal_type"] in policy.USED_SIGNALS for s in signals)
            outcome = (
                "SUCCESS"
                if used >= 2
                else "PARTIAL"
                if used
                else rng.choice(["FAILED", "PARTIAL", None])
            )
            topic = FACTS[ns_name]["templates"][n % len(FACTS[ns_name]["templates"])][1]
            body = {
                "session_id": f"conv-{n // 3}",
                "request_id": f"demo-{ns_name}-{n}",
                "namespace_scope": [ns_name],
                "context_budget": budget,
                "tokens_used": rng.randint(budget // 4, budget - 200),
                "context_text": f"question about {' and '.join(topic)}",
                "context_tags": topic,
                "ts": ts.isoformat(),
                "injections": [
                    {
                        "object_id": oid,
                        "rank_position": r + 1,
                        "representation_type": "STRUCTURED",
                        "token_cost": rng.randint(30, 140),
                        "composite_score": round(rng.uniform(0.3, 0.95), 3),
                    }
                    for r, oid in enumerate(injected)
                ],
                "signals": signals,
            }
            if outcome:
                body["outcome"] = outcome
            batch.append(ingest.Item(validate_session(body), f"demo-{ns_name}-{n}"))
            if len(batch) == 250 or n == len(times) - 1:
                ingest.record_sessions(client=client, items=batch)
                batch = []
        self._curate(client, created, rng, now)
        self._edges(client, created, rng, start)
        self._snapshots(ns, now)
        self.stdout.write(f"  {ns_name}: {len(created)} objects, {n_sessions} sessions")

    def _curate(self, client, created, rng, now):
        admin = services.Actor("demo-admin", "HUMAN_USER")
        for obj in rng.sample(created, 4):
            if obj.epistemic_type == "OBSERVED":
                services.object_pin(
                    client=client,
                    object_id=obj.pk,
                    reason="verified by ops",
                    actor=admin,
                    confidence=1.0,
                )
            elif obj.epistemic_type not in ("DEPRECATED",):
                services.object_pin(client=client, object_id=obj.pk, reason="key fact", actor=admin)
        for obj in rng.sample(created, 3):
            try:
                services.object_transition(
                    client=client,
                    object_id=obj.pk,
                    to="DEPRECATED",
                    reason="superseded",
                    actor=admin,
                )
            except Exception:  # already deprecated or pinned-and-deprecated: fine for a demo
                continue

    def _edges(self, client, created, rng, start):
        contexts = [
            "AUTHORITATIVE",
            "EXPLICIT",
            "INFERRED",
            "INFERRED",
            "SPECULATIVE",
            "SPECULATIVE",
        ]
        # how often independent evidence really corroborates, per context (for calibration)
        truth = {"AUTHORITATIVE": 0.95, "EXPLICIT": 0.85, "INFERRED": 0.55, "SPECULATIVE": 0.45}
        for _ in range(min(120, len(created) // 4)):
            a, b = rng.sample(created, 2)
            ctx = rng.choice(contexts)
            try:
                rel = edges.relationship_create(
                    client=client,
                    source=a.pk,
                    target=b.pk,
                    extraction_context=ctx,
                    relation=rng.choice(["same_customer", "depends_on", "contradicts", "about"]),
                    ts=start + timedelta(hours=rng.randint(1, 200)),
                )
            except Exception:  # a duplicate pair: skip it
                continue
            at = rel.created_at
            for _ in range(rng.randint(0, 5)):
                at += timedelta(hours=rng.randint(1, 96))
                if at >= timezone.now():
                    break
                kind = "corroborate" if rng.random() < truth[ctx] else "contradict"
                edges.relationship_evidence(
                    client=client,
                    relationship_id=rel.pk,
                    kind=kind,
                    provenance=rng.choice(["user", "external", "self"]),
                    ts=at,
                )

    def _snapshots(self, ns, now):
        rows = []
        for hours_back in range(7 * 24, -1, -6):
            ts = (now - timedelta(hours=hours_back)).replace(second=0)
            m = namespace_metrics(ns, ts - timedelta(hours=24), ts)
            # The alert history the beat's snapshots would have written (on the namespace's
            # chain), so the overview and /api/v1/alerts have something to show.
            alerts.alerts_apply(
                namespace_id=ns.pk, evaluated=m["metrics"], window=m["window"], at=ts
            )
            rows.append(
                MetricSnapshot(
                    namespace=ns,
                    ts=ts,
                    window_hours=24,
                    metrics=m["metrics"],
                    warnings=m["warnings"],
                )
            )
        MetricSnapshot.objects.bulk_create(rows, ignore_conflicts=True)

    def _simulations(self):
        now = timezone.now()
        runs = [
            ("stability_simulation", {"seed": 42}, simulations.stability_simulation(seed=42)),
            ("precision_simulation", {"seed": 42}, simulations.precision_simulation(seed=42)),
            ("benchmark_suite", {"seed": 42}, suite.benchmark_suite(seed=42)),
        ]
        with transaction.atomic():
            for kind, params, result in runs:
                TaskRun.objects.create(
                    id=uuid.uuid4(),
                    kind=kind,
                    params=params,
                    state=TaskRun.SUCCEEDED,
                    progress=1.0,
                    result=result,
                    created_by="demo",
                    started_at=now,
                    finished_at=now,
                )

    def _client(self, name: str, ns: Namespace) -> ApiClient:
        from django.contrib.auth import get_user_model

        user, _ = get_user_model().objects.get_or_create(username=name)
        client, _ = ApiClient.objects.get_or_create(
            user=user,
            defaults={"name": name, "role": "client", "token_hash": token_digest(new_token())},
        )
        client.namespaces.add(ns)
        return client
