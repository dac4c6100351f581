"""``seed_demo``: a realistic demo data set, written through the services like real traffic.

Deterministic (``--seed``). Three namespaces with different health: objects of every epistemic
type, and 30 days of signals in time order, so charts, the op log and as-of views have history.
"""

from __future__ import annotations

import random
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from feedback import services as feedback_services
from rms import services
from rms.models import ApiClient, Namespace

SUBJECTS = {
    "support": [
        ("Alice", "prefers answers in Python", ["alice", "python"]),
        ("Bob", "is on the Enterprise plan", ["bob", "billing"]),
        ("Carol", "wants invoices sent to finance@carol.example", ["carol", "billing"]),
        ("Dmitri", "reported the export bug in ticket #4821", ["dmitri", "export"]),
        ("Erin", "uses the EU data region", ["erin", "region"]),
        ("Farah", "asked not to be contacted by phone", ["farah", "contact"]),
        ("Gus", "runs version 3.2 of the desktop client", ["gus", "desktop"]),
        ("Hana", "prefers replies in Japanese", ["hana", "language"]),
    ],
    "travel": [
        ("the traveller", "prefers aisle seats", ["seat", "flight"]),
        ("the traveller", "is vegetarian", ["meal", "diet"]),
        ("the traveller", "has a Star Alliance Gold card", ["loyalty", "flight"]),
        ("the traveller", "avoids layovers shorter than 90 minutes", ["layover", "flight"]),
        ("the traveller", "books hotels near the city centre", ["hotel"]),
        ("the traveller", "travels with a folding bicycle", ["luggage"]),
    ],
    "devops": [
        ("the primary database", "runs PostgreSQL 15 on db-01", ["postgres", "db"]),
        ("deploys", "happen on weekdays before 16:00 UTC", ["deploy", "policy"]),
        ("the staging cluster", "has 3 nodes in eu-west-1", ["staging", "k8s"]),
        ("the on-call rota", "changes every Monday at 09:00", ["oncall"]),
        ("the API gateway", "rate-limits at 600 requests per minute", ["gateway", "limits"]),
        ("backups", "are kept for 35 days", ["backup", "policy"]),
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
QUALITY = {"support": 0.7, "travel": 0.45, "devops": 0.2}  # share of objects that get used


class Command(BaseCommand):
    help = "Load a realistic demo data set (namespaces, objects, 30 days of signals)."

    def add_arguments(self, parser):
        parser.add_argument("--objects", type=int, default=150, help="Objects per namespace.")
        parser.add_argument("--signals", type=int, default=1500, help="Signals per namespace.")
        parser.add_argument("--seed", type=int, default=7)

    def handle(self, *args, objects: int, signals: int, seed: int, **options):
        rng = random.Random(seed)
        now = timezone.now()
        start = now - timedelta(days=30)
        for ns_name, subjects in SUBJECTS.items():
            ns, _ = Namespace.objects.get_or_create(name=ns_name)
            client = self._client(f"demo-{ns_name}", ns)
            items = []
            for i in range(objects):
                who, what, tags = subjects[i % len(subjects)]
                etype = rng.choice(TYPES)
                items.append(
                    {
                        "namespace": ns_name,
                        "content": f"{who[0].upper()}{who[1:]} {what}"
                        + (f" (note {i})" if i >= len(subjects) else ""),
                        "domain_tags": tags,
                        "epistemic_type": etype,
                        "evidence_ids": [f"doc-{rng.randint(1, 400)}"],
                        "actor_id": "extractor-1",
                        "actor_type": "AI_AGENT",
                        "ts": start + timedelta(minutes=i),
                    }
                )
            created = services.object_create(client=client, items=items)
            useful = {o.pk for o in created if rng.random() < QUALITY[ns_name]}
            times = sorted(
                start + timedelta(hours=2) + timedelta(seconds=rng.uniform(0, 29 * 86400))
                for _ in range(signals)
            )
            for n, ts in enumerate(times):
                obj = rng.choice(created)
                if obj.epistemic_type == "CONDITIONAL" and rng.random() < 0.1:
                    services.object_condition(
                        client=client,
                        object_id=obj.pk,
                        ts=ts,
                        condition_state=rng.choice(["TRUE", "FALSE"]),
                    )
                    continue
                if obj.pk in useful:
                    kind = rng.choices(
                        ["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "UNUSED", "CORRECTED"],
                        [45, 20, 15, 15, 5],
                    )[0]
                else:
                    kind = rng.choices(
                        ["UNUSED", "CORRECTED", "REFERENCED", "TASK_FAILED_WITH"], [70, 12, 10, 8]
                    )[0]
                with transaction.atomic():
                    feedback_services.signal_record(
                        client=client,
                        object_id=obj.pk,
                        data={
                            "signal_type": kind,
                            "session_id": f"conv-{n // 4}",
                            "actor_id": rng.choice(["analyser", "user-1", "user-2"]),
                            "actor_type": "HUMAN_USER" if kind == "CONFIRMED" else "SYSTEM_PROCESS",
                            "ts": ts,
                        },
                        body_hash="-",
                        render=lambda r, o: {},
                    )
            self.stdout.write(f"  {ns_name}: {len(created)} objects, {signals} signals")

    def _client(self, name: str, ns: Namespace) -> ApiClient:
        from django.contrib.auth import get_user_model

        from rms.api.auth import new_token, token_digest

        user, _ = get_user_model().objects.get_or_create(username=name)
        client, _ = ApiClient.objects.get_or_create(
            user=user,
            defaults={"name": name, "role": "client", "token_hash": token_digest(new_token())},
        )
        client.namespaces.add(ns)
        return client
