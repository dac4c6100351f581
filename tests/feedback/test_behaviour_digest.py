"""A fixed, seeded workload through the real API and services, digested: the refactoring guard.

Objects, explicit signals posted alone, feedback sessions (single and batch, with repeated
``session_id``\\s, every client signal type, response analysis, replays and duplicates), an
IGNORED_REPEATEDLY sweep and a rebuild of every aggregate. The digest is a sha256 over every
operation (its canonical payload and its hash, chain by chain), every aggregate row, every
session tally and every object's state. Ids and times are fixed: operation ids and session
primary keys come from a seeded generator, every body carries its ``ts``, the sweep runs at a
fixed ``now`` and the clock is frozen. The hashes cover every column of every operation, so an
equal digest means the log is the same row for row.

The pinned value was computed before the planner and the signal path were restructured; a
change of behaviour (a weight, an order, a payload key) changes it. It is the same on SQLite and
PostgreSQL: floats round-trip exactly through both, and nothing in it depends on ``seq``.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from feedback import rebuild
from feedback.models import FeedbackAggregate
from feedback.sweep import sweep
from rms import oplog, services
from rms.models import MemoryObject, Operation, SessionTally
from rms.replay import iso
from tests.factories import post

pytestmark = pytest.mark.django_db

DIGEST = "22ebc1bcb209565a37eddb20939688deb44c7f645528dc97ba775d25acabf504"

SEED = 35
T0 = datetime(2026, 6, 1, tzinfo=UTC)
SWEEP_NOW = T0 + timedelta(days=20)
FROZEN = T0 + timedelta(days=21)
CLIENT_SIGNALS = (
    "REFERENCED",
    "CONFIRMED",
    "TASK_COMPLETED_WITH",
    "CORROBORATED_BY_EXTERNAL",
    "CORRECTED",
    "CONTRADICTED_BY_OBSERVATION",
    "TASK_FAILED_WITH",
    "UNUSED",
)
TYPES = ("ASSERTED", "OBSERVED", "INFERRED", "HYPOTHETICAL", "UNVERIFIED")
WORDS = [
    "refunds",
    "annual",
    "plans",
    "prorated",
    "monthly",
    "staging",
    "cluster",
    "postgres",
    "invoices",
    "finance",
    "alice",
    "python",
    "pipelines",
    "weather",
    "lisbon",
    "deploy",
    "friday",
    "rollback",
    "billing",
    "latency",
    "cache",
]


def oid(n: int) -> uuid.UUID:
    return uuid.UUID(int=0x35_0000 + n)


class SeededIds:
    """Operation ids and session primary keys from a seeded generator, in call order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def text(self) -> str:
        return str(self.uuid())


def contents(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.sample(WORDS, 6)) for _ in range(n)]


def create_objects(api, rng: random.Random, texts: list[str]) -> None:
    items = [
        {
            "id": str(oid(i)),
            "namespace": "support",
            "content": text,
            "epistemic_type": TYPES[i % len(TYPES)],
            "domain_tags": rng.sample(["billing", "infra", "people", "weather"], 1),
            "evidence_ids": [f"ev-{i}"] if i % 3 == 0 else [],
            "ts": T0.isoformat(),
            **({"decay_profile": "PERMANENT"} if i == 7 else {}),
        }
        for i, text in enumerate(texts)
    ]
    r = api.post("/api/v1/objects", items, format="json")
    assert r.status_code == 201, r.content


def session_body(rng: random.Random, n: int, texts: list[str], hour: float) -> dict:
    pool = list(range(len(texts)))
    injected = rng.sample(pool, rng.randint(2, 5))
    signals = []
    for _ in range(rng.randint(0, 3)):
        target = rng.choice(injected if rng.random() < 0.8 else pool)
        kind = rng.choice(CLIENT_SIGNALS)
        if kind == "UNUSED" and any(
            s["object_id"] == str(oid(target)) and s["signal_type"] == "UNUSED" for s in signals
        ):
            continue
        entry = {"object_id": str(oid(target)), "signal_type": kind}
        if rng.random() < 0.4:
            entry["actor_type"] = "AI_AGENT"
            entry["actor_id"] = "agent-1"
            entry["evidence_ids"] = rng.sample(["ev-0", "ev-3", "ev-x"], rng.randint(0, 2))
        signals.append(entry)
    body = {
        "session_id": f"conv-{rng.randint(0, 1)}",
        "request_id": f"req-{n}",
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": rng.randint(50, 900),
        "ts": (T0 + timedelta(hours=hour)).isoformat(),
        "injections": [
            {
                "object_id": str(oid(i)),
                "token_cost": rng.randint(5, 60),
                "rank_position": k + 1,
                "composite_score": round(rng.random(), 3),
            }
            for k, i in enumerate(injected)
        ],
        "signals": signals,
        "context_tags": rng.sample(["billing", "infra", "people", "weather"], rng.randint(0, 2)),
    }
    if rng.random() < 0.5:
        body["context_text"] = " ".join(rng.sample(WORDS, 5))
    if rng.random() < 0.7:
        body["outcome"] = rng.choice(["SUCCESS", "PARTIAL", "FAILED"])
    if rng.random() < 0.3:
        mentioned = [texts[i] for i in injected if rng.random() < 0.5]
        body["response_text"] = "Here is what I found. " + ". ".join(mentioned) + "."
        body["detect"] = True
    return body


def streak_body(n: int, ids: list[int], hour: float) -> dict:
    """A session in which ``ids`` end UNUSED: it grows their streaks towards the sweep."""
    return {
        "session_id": f"streak-{n}",
        "request_id": f"streak-{n}",
        "namespace_scope": ["support"],
        "context_budget": 500,
        "tokens_used": 100,
        "ts": (T0 + timedelta(hours=hour)).isoformat(),
        "injections": [{"object_id": str(oid(i)), "token_cost": 10} for i in ids],
        "signals": [],
        "context_tags": ["billing"] if n % 2 else [],
    }


def run_workload(api, admin) -> None:
    rng = random.Random(SEED)
    texts = contents(rng, 16)
    create_objects(api, rng, texts)
    services.object_pin(client=admin, object_id=oid(5), reason="operator", ts=T0)
    hour = 1.0
    # Signals posted alone, with and without request_id (and one retry).
    for n in range(12):
        body = {
            "signal_type": rng.choice(CLIENT_SIGNALS[:-1]),
            "session_id": f"conv-{rng.randint(0, 1)}",
            "ts": (T0 + timedelta(hours=hour)).isoformat(),
            "request_id": str(uuid.UUID(int=0x516_0000 + n)),
        }
        if n % 4 == 0:
            body.update(actor_type="AI_AGENT", actor_id="agent-2", evidence_ids=["ev-0"])
        target = oid(rng.randrange(len(texts)))
        path = f"/api/v1/objects/{target}/signals"
        r = api.post(path, body, format="json")
        assert r.status_code == 201, r.content
        if n == 3:
            assert api.post(path, body, format="json").status_code == 200
        hour += 0.5
    # Three humans confirm one object in one conversation: the third meets the session cap.
    for n in range(3):
        body = {
            "signal_type": "CONFIRMED",
            "session_id": "conv-cap",
            "actor_type": "HUMAN_USER",
            "actor_id": f"user-{n}",
            "ts": (T0 + timedelta(hours=hour)).isoformat(),
        }
        r = api.post(f"/api/v1/objects/{oid(2)}/signals", body, format="json")
        assert r.status_code == 201, r.content
        hour += 0.5
    # Single sessions, one replayed.
    for n in range(20):
        body = session_body(rng, n, texts, hour)
        r = post(api, body)
        assert r.status_code == 201, r.content
        if n == 4:
            assert post(api, body).status_code == 200
        hour += 1
    # Batches: with an in-batch duplicate and a replay of a stored request.
    for b in range(2):
        bodies = [session_body(rng, 100 + 10 * b + k, texts, hour + k) for k in range(8)]
        bodies.append(dict(bodies[2]))
        bodies.append(session_body(rng, 3, texts, hour))  # req-3 again: another body, 409
        hour += 9
        r = api.post("/api/v1/feedback-sessions/batch", bodies, format="json")
        assert r.status_code == 207, r.content
        statuses = [x["status"] for x in r.json()["results"]]
        assert statuses == [201] * 8 + [200, 409], statuses
    # Streaks: objects 10–15, 5 (pinned) and 7 (PERMANENT) end UNUSED six times in a row.
    for n in range(6):
        post_ok = post(api, streak_body(n, [10, 11, 12, 13, 14, 15, 5, 7], hour))
        assert post_ok.status_code == 201, post_ok.content
        hour += 1
    summary = sweep(now=SWEEP_NOW)
    assert (summary["penalized"], summary["exempt"], summary["not_penalized"]) == (4, 2, 2)
    rebuild.rebuild_aggregates()


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def plain(value):
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


#: Columns numbered by database sequences (not reset between tests on PostgreSQL): left out.
SEQUENTIAL = {"namespace_id"}


def row_text(row: dict) -> str:
    return canonical({k: plain(v) for k, v in sorted(row.items()) if k not in SEQUENTIAL})


def digest() -> str:
    h = hashlib.sha256()
    ops = Operation.objects.order_by("target_id", "seq").values_list(
        "target_id", "op_type", "payload", "hash"
    )
    for target, op_type, payload, op_hash in ops:
        h.update(canonical([str(target), op_type, payload, op_hash]).encode())
    for agg in FeedbackAggregate.objects.order_by("object_id").values():
        h.update(row_text(agg).encode())
    tallies = SessionTally.objects.order_by("object_id", "session_id").values(
        "object_id", "session_id", "gamma_total", "repeats"
    )
    for tally in tallies:
        h.update(row_text(tally).encode())
    for obj in MemoryObject.objects.order_by("id").values():
        h.update(row_text(obj).encode())
    return h.hexdigest()


#: INJECTION_EVENT payload keys added for the ranking event (docs/DECISIONS.md, "Score mirror").
RANKING_KEYS = ("utility", "uses", "last_use_at", "version")
#: The digest of everything but the operation hashes, with those keys taken out of the
#: INJECTION_EVENT payloads: pinned on the code before they were added, so the only change to
#: what ingestion stores is those keys (and the hashes that cover them).
DIGEST_WITHOUT_RANKING = "781c4f702240e0e6f56047e54a402fd9a462392b1ce142e4f99291fad5b1f887"


def digest_without_ranking() -> str:
    h = hashlib.sha256()
    ops = Operation.objects.order_by("target_id", "seq").values_list(
        "target_id", "op_type", "payload"
    )
    for target, op_type, payload in ops:
        if op_type == "INJECTION_EVENT":
            payload = {k: v for k, v in payload.items() if k not in RANKING_KEYS}
        h.update(canonical([str(target), op_type, payload]).encode())
    for agg in FeedbackAggregate.objects.order_by("object_id").values():
        h.update(row_text(agg).encode())
    tallies = SessionTally.objects.order_by("object_id", "session_id").values(
        "object_id", "session_id", "gamma_total", "repeats"
    )
    for tally in tallies:
        h.update(row_text(tally).encode())
    for obj in MemoryObject.objects.order_by("id").values():
        obj = {k: v for k, v in obj.items() if k != "head_hash"}
        h.update(row_text(obj).encode())
    return h.hexdigest()


def test_seeded_workload_digest_is_unchanged(client_api, admin_api, monkeypatch):
    ids = SeededIds(SEED)
    monkeypatch.setattr(oplog, "new_id", ids.text)
    monkeypatch.setattr(uuid, "uuid4", ids.uuid)
    with time_machine.travel(FROZEN, tick=False):
        run_workload(client_api, admin_api.row)
    assert Operation.objects.count() > 500
    feedback = Operation.objects.filter(op_type="FEEDBACK_EVENT")
    assert feedback.filter(payload__detected=True, payload__signal_type="REFERENCED").exists()
    assert feedback.filter(payload__detected=True, payload__signal_type="UNUSED").exists()
    assert Operation.objects.filter(op_type="REINFORCE", payload__cap_applied=True).exists()
    assert digest_without_ranking() == DIGEST_WITHOUT_RANKING
    # Each object's last INJECTION_EVENT carries what its aggregate holds now.
    last = {}
    for op in Operation.objects.filter(op_type="INJECTION_EVENT").order_by("seq"):
        last[op.target_id] = op.payload
    assert len(last) > 10
    for agg in FeedbackAggregate.objects.filter(object_id__in=list(last)):
        payload = last[agg.object_id]
        assert payload["utility"] == agg.utility
        assert payload["uses"] == agg.uses
        assert payload["last_use_at"] == iso(agg.last_use_at)
    assert digest() == DIGEST
