"""Shared by the score mirror's live-server tests: random objects and sessions, and the check
that the mirror ranks exactly as ``/rank`` does."""

from __future__ import annotations

import uuid

import pytest

from rms import policy

TYPES = ["ASSERTED", "OBSERVED", "CONDITIONAL", "INFERRED"]
SIGNALS = [
    policy.CONFIRMED,
    policy.REFERENCED,
    policy.CORRECTED,
    policy.TASK_FAILED_WITH,
    policy.UNUSED,
    policy.TASK_COMPLETED_WITH,
]


def check_equal(mirror, client, namespace, ids, now, rng):
    pairs = [(oid, rng.random()) for oid in ids]
    local = mirror.rank(pairs, now=now)
    remote = client.rank(namespace, pairs, now=now)
    assert [r["object_id"] for r in local] == [r["object_id"] for r in remote]
    for mine, theirs in zip(local, remote, strict=True):
        assert mine["score"] == pytest.approx(theirs["score"], abs=1e-12, rel=0)
        assert mine["eligible"] is theirs["eligible"]
        assert mine["reason"] == theirs["reason"]
    return local


def new_objects(client, namespace, rng, n):
    items = []
    for i in range(n):
        etype = rng.choice(TYPES)
        item = {
            "namespace": namespace,
            "content": f"fact {i} {uuid.uuid4()}",
            "epistemic_type": etype,
            "decay_profile": rng.choice(["SLOW", "MEDIUM", "FAST", "RAPID", "PERMANENT"]),
        }
        if etype == "CONDITIONAL":
            item["condition_state"] = rng.choice(["TRUE", "UNKNOWN", "FALSE"])
        items.append(item)
    return [o["id"] for o in client.create_objects(items)]


def session(namespace, rng, ids):
    injected = rng.sample(ids, k=min(len(ids), rng.randint(1, 4)))
    signals = [
        {"object_id": oid, "signal_type": rng.choice(SIGNALS)}
        for oid in injected
        if rng.random() < 0.6
    ]
    return {
        "session_id": f"s-{uuid.uuid4()}",
        "namespace_scope": [namespace],
        "context_budget": 4096,
        "tokens_used": 100,
        "outcome": rng.choice(["SUCCESS", "PARTIAL", "FAILED", None]),
        "injections": [
            {"object_id": oid, "token_cost": 20, "rank_position": r + 1}
            for r, oid in enumerate(injected)
        ],
        "signals": signals,
    }
