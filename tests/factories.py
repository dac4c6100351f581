"""Test data builders. Objects are created through the services, never raw, so every object in
a test has its OBJECT_CREATED operation and a valid chain."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import factory
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from feedback import aggregates
from feedback.models import FeedbackAggregate
from rms import services
from rms.api.auth import new_token, token_digest
from rms.models import ApiClient, MemoryObject, Namespace, Operation
from taskruns import runs
from taskruns.models import TaskRun


class NamespaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Namespace
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"ns-{n}")


def make_namespace(name: str, **kw) -> Namespace:
    return NamespaceFactory(name=name, **kw)


def make_client(name: str, role: str, namespaces: list[str] | None = None):
    """An ApiClient with a fresh token; returns (client, token)."""
    user = get_user_model().objects.create(username=name)
    token = new_token()
    client = ApiClient.objects.create(
        user=user, name=name, role=role, token_hash=token_digest(token)
    )
    for ns in namespaces or []:
        client.namespaces.add(make_namespace(ns))
    return client, token


def make_object(client: ApiClient, namespace: str = "support", **fields):
    item = {"namespace": namespace, "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}
    item.update(fields)
    return services.object_create(client=client, items=[item])[0]


# --- feedback sessions through the API ------------------------------------------------------------

#: The origin of the session helpers' times: objects at T0, a session ``hours`` h after it.
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def make_objects(api, n=3, **kw) -> list[str]:
    """``n`` ASSERTED objects in ``support`` created at T0 through the API; their ids."""
    items = [
        {
            "namespace": "support",
            "content": f"fact {i}",
            "epistemic_type": "ASSERTED",
            "ts": T0.isoformat(),
            **kw,
        }
        for i in range(n)
    ]
    return [o["id"] for o in api.post("/api/v1/objects", items, format="json").json()]


def session(request_id, injections, signals=(), *, budget=1000, outcome=None, hours=1, **kw):
    """A session body: ``injections`` as (object id, token cost), ``signals`` as (object id,
    signal type[, extra fields])."""
    body = {
        "session_id": kw.pop("session_id", f"conv-{request_id}"),
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": budget,
        "tokens_used": 100,
        "ts": (T0 + timedelta(hours=hours)).isoformat(),
        "injections": [
            {"object_id": oid, "token_cost": cost, "rank_position": i + 1, "composite_score": 0.5}
            for i, (oid, cost) in enumerate(injections)
        ],
        "signals": [
            {"object_id": oid, "signal_type": st, **extra}
            for oid, st, *rest in signals
            for extra in [rest[0] if rest else {}]
        ],
        **kw,
    }
    if outcome:
        body["outcome"] = outcome
    return body


def post(api, body):
    return api.post("/api/v1/feedback-sessions", body, format="json")


# --- IGNORED_REPEATEDLY streaks (SPEC §9) ---------------------------------------------------------

#: The sweeps' check time: after every session the helpers post.
SWEEP_NOW = T0 + timedelta(days=30)
REFUND_CONTENT = "Refunds for annual plans are prorated monthly"
# word sets: {refunds, annual, plans, prorated, monthly} and
# {customer, asks, whether, annual, plan, refunds, prorated}: 3 shared of 9 → 1/3 ≥ 0.2
REFUND_TEXT = "The customer asks whether annual plan refunds are prorated"


def new_object(api, content=REFUND_CONTENT, ns="support", **fields):
    obj = make_object(api.row, ns, content=content, ts=T0, **fields)
    return obj.pk


def unused_session(api, ids, hour, *, tags=None, text=None, ns="support", signals=()):
    """A session injecting ``ids`` at T0 + ``hour`` h; without signals each ends UNUSED."""
    body = session(
        f"r-{uuid.uuid4().hex[:12]}",
        [(str(i), 10) for i in ids],
        [(str(oid), kind) for oid, kind in signals],
        hours=hour,
        namespace_scope=[ns],
    )
    if tags is not None:
        body["context_tags"] = tags
    if text is not None:
        body["context_text"] = text
    response = post(api, body)
    assert response.status_code == 201, response.json()
    return response.json()


def streak(api, ids, n, *, start=1, **context):
    """``n`` sessions, one an hour from ``start``, in which ``ids`` end UNUSED."""
    for hour in range(start, start + n):
        unused_session(api, ids, hour, **context)


def aggregate(oid) -> FeedbackAggregate:
    return FeedbackAggregate.objects.get(object_id=oid)


def chain(oid) -> list[Operation]:
    return list(Operation.objects.filter(target_id=oid).order_by("seq"))


def ignored_checks(oid) -> list[dict]:
    return [op.payload for op in chain(oid) if op.op_type == "IGNORED_CHECK"]


#: One object per sweep outcome: (label, fields); the label is also its content unless given.
CRASH_CASES = [
    ("tag", {"domain_tags": ["billing"]}),
    ("text", {"content": REFUND_CONTENT, "domain_tags": ["x"]}),
    ("irrelevant", {"content": "Lisbon weather", "domain_tags": ["weather"]}),
    ("unknown", {"content": "no context ever"}),
    ("pinned", {"content": "pinned fact"}),
    ("permanent", {"content": "permanent fact", "decay_profile": "PERMANENT"}),
    ("long", {"content": "seven sessions", "domain_tags": ["billing"]}),
]


def build_sweep_twin(api, admin, ns: str) -> dict:
    """The same objects and sessions in namespace ``ns`` (content keys the comparison), so two
    namespaces swept differently can be compared with :func:`sweep_state`."""
    ids = {}
    for label, fields in CRASH_CASES:
        fields = {"content": label, **fields}
        ids[label] = new_object(api, ns=ns, **fields)
    services.object_pin(client=admin, object_id=ids["pinned"], reason="ok", ts=T0)
    context = [ids[k] for k in ("tag", "text", "irrelevant", "pinned", "permanent", "long")]
    streak(api, context, 5, ns=ns, tags=["billing"], text=REFUND_TEXT)
    streak(api, [ids["unknown"], ids["long"]], 2, start=6, ns=ns)
    streak(api, [ids["unknown"]], 3, start=8, ns=ns)
    return ids


def sweep_state(ids: dict) -> dict:
    """Everything a sweep may change on the objects of :func:`build_sweep_twin`, by label."""
    out = {}
    for label, oid in ids.items():
        obj = MemoryObject.objects.get(pk=oid)
        a = aggregate(oid)
        out[label] = {
            "object": (
                obj.confidence,
                obj.salience_base,
                obj.version,
                obj.pinned,
                obj.reinforcement_count,
                obj.last_op_ts,
            ),
            "aggregate": tuple(getattr(a, f) for f in aggregates.FIELDS),
            "chain": [op.op_type for op in chain(oid)],
            "checks": [
                {k: v for k, v in c.items() if k != "streak_feedback_session_ids"}
                for c in ignored_checks(oid)
            ],
        }
    return out


def run_without_django(code: str) -> None:
    """Run ``code`` in a fresh interpreter from the repository root with no Django settings (a
    pure module must import and work there); fails with the child's stderr."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(root)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# --- task runs (the worker tests and the fan-out tests) ------------------------------------

HUMAN = {"actor_type": "HUMAN_USER", "actor_id": "user-1"}


def start(api, kind, params=None):
    body = {"kind": kind} if params is None else {"kind": kind, "params": params}
    return api.post("/api/v1/tasks", body, format="json")


def build_log(client_api, objects=3, sessions=3):
    """Objects with a few feedback sessions each: every op type a verify has to fold."""
    ids = make_objects(client_api, objects)
    for k in range(sessions):
        body = session(
            f"log-{k}",
            [(oid, 10 + i) for i, oid in enumerate(ids)],
            [(ids[0], "CONFIRMED", HUMAN), (ids[1 % len(ids)], "CORRECTED", HUMAN)],
            outcome="SUCCESS",
            hours=k + 1,
        )
        assert post(client_api, body).status_code == 201
    return ids


def same_aggregates(a: dict, b: dict) -> bool:
    fields = [*aggregates.FIELDS, "usage_ratio"]
    return set(a) == set(b) and all(getattr(a[k], f) == getattr(b[k], f) for k in a for f in fields)


def queued(client, kind, params=None) -> TaskRun:
    return runs.task_start(client=client, kind=kind, params=params or {})


def go_stale(row) -> None:
    """What time does to the run or chunk of a dead worker: its last heartbeat grows old."""
    old = timezone.now() - timedelta(seconds=settings.RMS_TASK_HEARTBEAT_TIMEOUT + 1)
    type(row).objects.filter(pk=row.pk).update(heartbeat_at=old)


# --- objects and signals through the HTTP API ---------------------------------------------------

#: A valid POST /objects body; a test overrides the fields it is about.
OBJECT_BODY = {
    "namespace": "support",
    "content": "Alice prefers Python",
    "epistemic_type": "OBSERVED",
}


def api_object(api, **fields) -> str:
    """Create an object through POST /api/v1/objects (OBJECT_BODY with ``fields``); its id."""
    return api.post("/api/v1/objects", {**OBJECT_BODY, **fields}, format="json").json()["id"]


def api_signal(api, oid, **body):
    """POST a signal to one object: a human user's CONFIRMED in session s-1 unless ``body`` says
    otherwise; the response."""
    body = {
        "signal_type": "CONFIRMED",
        "session_id": "s-1",
        "actor_id": "user-9",
        "actor_type": "HUMAN_USER",
        **body,
    }
    return api.post(f"/api/v1/objects/{oid}/signals", body, format="json")


# --- Prometheus text scrapes (GET /metrics) -------------------------------------------------


def scrape(api, **extra) -> dict[tuple[str, tuple], float]:
    resp = api.get("/metrics", **extra)
    assert resp.status_code == 200, resp.content
    assert resp["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(resp.content.decode())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


# --- the change feed ---


def feed(api, **params):
    response = api.get("/api/v1/changes", params)
    assert response.status_code == 200, response.content
    return response.json()


def follow(api, after=None, **params) -> tuple[list[dict], str]:
    """Every event after ``after``, following next_cursor until has_more is false."""
    events: list[dict] = []
    while True:
        page = feed(api, **({"after": after} if after else {}), **params)
        events.extend(page["results"])
        after = page["next_cursor"]
        if not page["has_more"]:
            return events, after


def hourly_sessions(api, sessions: int, prefix: str) -> list[str]:
    """Four objects, ``sessions`` sessions an hour apart, each injecting all four with a
    confirmation and a correction: a few thousand operations with every kind a fold reads
    (the retention tests' log). Returns the objects' ids."""
    ids = make_objects(api, 4)
    for k in range(sessions):
        body = session(
            f"{prefix}-{k}",
            [(oid, 10 + i) for i, oid in enumerate(ids)],
            [(ids[k % 4], "CONFIRMED", HUMAN), (ids[(k + 1) % 4], "CORRECTED", HUMAN)],
            outcome="SUCCESS",
            hours=k + 1,
        )
        assert post(api, body).status_code == 201
    return ids
