"""A log full of personal strings, and the helpers that erase it and search for them."""

from __future__ import annotations

import pytest

from erasure.models import Erasure
from feedback.models import FeedbackSession
from rms import verification
from taskruns import tasks
from taskruns.models import TaskRun
from tests.factories import T0, api_object, post, session

#: Every personal string the log holds, by what it is.
ALICE = "alice-7f3e"  # an actor id
CONTENT = "Alice-health-condition-qx81"
OTHER_CONTENT = "Bob-employer-acme-zz42"
TAG = "tag-oncology-vv19"
EVIDENCE = "doc-medical-record-4411"
CONTEXT = "context-text-alice-asks-kk03"
CONTEXT_TAG = "ctxtag-private-pp77"
SIGNAL_EVIDENCE = "doc-chat-7731"
SESSION_ID = "conv-alice-session-551"


def build_personal_log(client_api) -> dict:
    """Two objects (one about Alice, one not), a session of Alice's with her signals, and a
    signal of Alice's on the other object through the object API."""
    alice_obj = api_object(
        client_api,
        content=CONTENT,
        domain_tags=[TAG],
        evidence_ids=[EVIDENCE],
        ts=T0.isoformat(),
    )
    other = api_object(client_api, content=OTHER_CONTENT, ts=T0.isoformat())
    body = session(
        "req-alice-1",
        [(alice_obj, 10), (other, 12)],
        [
            (alice_obj, "CONFIRMED", {"actor_id": ALICE, "actor_type": "HUMAN_USER",
                                      "evidence_ids": [SIGNAL_EVIDENCE]}),
            (other, "CORRECTED", {"actor_id": ALICE, "actor_type": "HUMAN_USER"}),
        ],
        session_id=SESSION_ID,
        context_text=CONTEXT,
        context_tags=[CONTEXT_TAG],
        outcome="SUCCESS",
    )  # fmt: skip
    response = post(client_api, body)
    assert response.status_code == 201, response.json()
    return {"object": alice_obj, "other": other}


def erase(admin_api, kind: str, subject: str | None, namespace: str = "support") -> dict:
    """POST the erasure, run its task here (as a worker would), return the receipt."""
    body = {"subject": {"kind": kind, "id": subject}, "namespace": namespace, "reason": "Art. 17"}
    response = admin_api.post("/api/v1/erasures", body, format="json")
    assert response.status_code == 202, response.json()
    out = response.json()
    assert tasks.run_task.run(out["task"]) == TaskRun.SUCCEEDED
    receipt = admin_api.get(f"/api/v1/erasures/{out['id']}")
    assert receipt.status_code == 200
    return receipt.json()


def chain_result() -> dict:
    heads = FeedbackSession.objects.order_by("pk").values_list("pk", "head_hash")
    return verification.verify_chain_all(extra_heads=heads, extra_total=heads.count())


@pytest.fixture
def personal_log(client_api):
    return build_personal_log(client_api)


def completed(receipt: dict) -> bool:
    return receipt["state"] == Erasure.COMPLETED and receipt["operation_id"] is not None


def numbers(value):
    """The numbers of a JSON answer, in order (what erasure must never change)."""
    if isinstance(value, dict):
        return [(k, numbers(v)) for k, v in sorted(value.items()) if numbers(v) != []]
    if isinstance(value, list):
        return [n for v in value for n in ([numbers(v)] if numbers(v) != [] else [])]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return []
    return value
