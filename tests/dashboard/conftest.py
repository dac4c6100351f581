"""Dashboard fixtures: logged-in personas, and a small feedback history written through the
services (objects, two feedback sessions with signals, a relationship)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from feedback import ingest
from feedback.api.views import session_item
from rms import edges
from tests.factories import make_client, make_namespace, make_object

T0 = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Metrics and histograms are cached for a minute; every test starts cold."""
    cache.clear()
    yield
    cache.clear()


def login(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def namespaces(db):
    return make_namespace("support"), make_namespace("billing")


@pytest.fixture
def admin(namespaces):
    return make_client("ada-admin", "admin")[0].user


@pytest.fixture
def operator(namespaces):
    return make_client("otto-operator", "operator")[0].user


@pytest.fixture
def client_user(namespaces):
    """A client of ``support`` only."""
    return make_client("cleo-client", "client", ["support"])[0].user


@pytest.fixture
def outsider(namespaces):
    """A client of ``billing`` only: must never see ``support``."""
    return make_client("olga-outsider", "client", ["billing"])[0].user


@pytest.fixture
def superuser(db):
    return get_user_model().objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def nobody(db):
    """A Django account without an ApiClient and not a superuser: no dashboard role."""
    return get_user_model().objects.create_user("nobody", password="pw")


@dataclass
class History:
    writer: object
    objects: list
    sessions: list
    billing_object: object
    relationship: object


def session_body(request_id, injections, signals=(), *, hours=1, budget=1000, outcome="SUCCESS"):
    return {
        "session_id": f"conv-{request_id}",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": budget,
        "tokens_used": 400,
        "context_text": "what stack does Alice use",
        "context_tags": ["alice"],
        "outcome": outcome,
        "ts": (T0 + timedelta(hours=hours)).isoformat(),
        "injections": [
            {
                "object_id": str(oid),
                "rank_position": i + 1,
                "token_cost": cost,
                "composite_score": 0.6,
            }
            for i, (oid, cost) in enumerate(injections)
        ],
        "signals": [
            {"object_id": str(oid), "signal_type": st, "detection_method": method}
            for oid, st, method in signals
        ],
    }


def record(writer, *bodies):
    results = ingest.record_sessions(client=writer, items=[session_item(b) for b in bodies])
    for status, body in results:
        assert status == 201, body
    return [body for _, body in results]


def build_history(writer, *, objects: int = 3, sessions: int = 2) -> History:
    objs = [
        make_object(
            writer,
            content=f"Alice prefers Python {i}",
            domain_tags=["alice"],
            ts=T0 - timedelta(days=1),
        )
        for i in range(objects)
    ]
    bodies = []
    for n in range(sessions):
        signals = [(objs[0].pk, "CONFIRMED", "explicit_user")]
        if n == 0 and len(objs) > 1:
            signals.append((objs[1].pk, "CORRECTED", "explicit_user"))
        bodies.append(
            session_body(
                f"r-{n}",
                [(o.pk, 40 + i) for i, o in enumerate(objs)],
                signals,
                hours=1 + n,
            )
        )
    records = record(writer, *bodies)
    billing_writer = make_client(f"billing-{writer.name}", "client", ["billing"])[0]
    other = make_object(billing_writer, namespace="billing", content="Invoices go to finance")
    rel = None
    if len(objs) > 1:
        rel = edges.relationship_create(
            client=writer,
            source=objs[0].pk,
            target=objs[1].pk,
            relation="implies",
            extraction_context="INFERRED",
        )
        edges.relationship_evidence(
            client=writer, relationship_id=rel.pk, kind="corroborate", provenance="external"
        )
    return History(writer, objs, records, other, rel)


@pytest.fixture
def history(namespaces):
    writer = make_client("writer", "client", ["support"])[0]
    return build_history(writer)
