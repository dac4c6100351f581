"""Server-side detection (issue: signal detection): sessions with response_text and detect,
the RFC-0009 explicit-feedback check, and POST /detect."""

from __future__ import annotations

import random
import uuid

import pytest
from django.db import connection

from analysis import api as detection
from feedback import aggregates, rebuild
from feedback.models import FeedbackAggregate
from rms.models import Operation, SessionTally
from tests.factories import post, session

pytestmark = pytest.mark.django_db

CONTENTS = [
    "Alice prefers Python for data pipelines",
    "The staging cluster runs PostgreSQL 15 on db-07",
    "Bob's invoices go to finance@bob.example",
]
RESPONSE = (
    "Since Alice prefers Python for data pipelines, here is a pandas example. "
    "Let me know if you need anything else."
)


def make(api, contents=CONTENTS):
    body = [
        {
            "namespace": "support",
            "content": c,
            "epistemic_type": "ASSERTED",
            "ts": "2026-06-01T00:00:00Z",
        }
        for c in contents
    ]
    return [o["id"] for o in api.post("/api/v1/objects", body, format="json").json()]


def test_detected_signals_are_discounted_and_never_explicit(client_api):
    a, b, c = make(client_api)
    body = session(
        "d1",
        [(a, 10), (b, 10), (c, 10)],
        [(c, "CONFIRMED", {"actor_type": "HUMAN_USER", "actor_id": "u"})],
    )
    body.update(response_text=RESPONSE + " Bob's invoices go to finance@bob.example.", detect=True)
    r = post(client_api, body)
    assert r.status_code == 201, r.content
    rec = r.json()
    by_obj = {s["object_id"]: s for s in rec["signals"]}
    # a: referenced by the response → REFERENCED from the analyser, LOW, γ = 0.08 · 0.5
    assert by_obj[a]["signal_type"] == "REFERENCED" and by_obj[a]["detected"] is True
    assert by_obj[a]["detection_method"] == "response_analysis"
    assert by_obj[a]["reliability_class"] == "LOW" and by_obj[a]["effective_gamma"] == 0.04
    # b: not mentioned → UNUSED recorded as detected by response analysis
    assert rec["unused_ids"] == [b]
    fe = Operation.objects.get(target_id=b, op_type="FEEDBACK_EVENT")
    assert fe.payload["detection_method"] == "response_analysis" and fe.payload["detected"]
    # c: the explicit CONFIRMED stays explicit and is not analysed again
    assert by_obj[c]["signal_type"] == "CONFIRMED" and "detected" not in by_obj[c]
    assert by_obj[c]["detection_method"] == "explicit_user"
    assert Operation.objects.filter(target_id=c, op_type="FEEDBACK_EVENT").count() == 1


def test_without_detect_silence_is_injection_tracking(client_api):
    a, b, _ = make(client_api)
    body = session("d2", [(a, 10), (b, 10)])
    body["response_text"] = RESPONSE
    rec = post(client_api, body).json()
    assert rec["signals"] == [] and rec["unused_ids"] == [a, b]
    methods = {
        o.payload["detection_method"] for o in Operation.objects.filter(op_type="FEEDBACK_EVENT")
    }
    assert methods == {"injection_tracking"}


def test_detect_needs_response_text(client_api):
    (a, *_) = make(client_api)
    r = post(client_api, {**session("d3", [(a, 10)]), "detect": True})
    assert r.status_code == 400 and "response_text" in r.json()["error"]["fields"]


def test_explicit_feedback_is_detected_100_percent(client_api):
    """RFC-0009 §13: every explicit signal posted is recorded as such, even with detection on."""
    ids = make(client_api, [f"fact number {i} about topic {i}" for i in range(12)])
    rng = random.Random(5)
    posted = recorded = 0
    for n in range(40):
        injected = rng.sample(ids, 6)
        explicit = [
            (
                oid,
                rng.choice(["CONFIRMED", "CORRECTED", "TASK_COMPLETED_WITH"]),
                {"actor_type": "HUMAN_USER", "actor_id": "u", "detection_method": "explicit_user"},
            )
            for oid in injected[: rng.randint(0, 4)]
        ]
        body = session(f"x{n}", [(oid, 10) for oid in injected], explicit, hours=1 + n)
        body.update(
            response_text=" ".join(f"fact number {i}" for i in range(0, 12, 2)), detect=True
        )
        rec = post(client_api, body).json()
        sent = {(oid, st) for oid, st, _ in explicit}
        got = {
            (s["object_id"], s["signal_type"])
            for s in rec["signals"]
            if s["detection_method"] == "explicit_user" and not s.get("detected")
        }
        posted += len(sent)
        recorded += len(sent & got)
        assert not any(
            s.get("detected") and s["object_id"] in {o for o, _ in sent} for s in rec["signals"]
        )
    assert posted > 50 and recorded == posted
    folded = rebuild.fold_log()
    for row in FeedbackAggregate.objects.all():
        for f in aggregates.FIELDS:
            assert getattr(row, f) == getattr(folded[row.object_id], f)


def test_detect_endpoint(client_api, outsider_api):
    a, b, c = make(client_api)
    r = client_api.post(
        "/api/v1/detect", {"response_text": RESPONSE, "object_ids": [b, a]}, format="json"
    )
    assert r.status_code == 200
    res = r.json()["results"]
    assert [x["object_id"] for x in res] == [b, a]
    assert [x["signal_type"] for x in res] == ["UNUSED", "REFERENCED"]
    assert all(0 <= x["score"] <= 1 and x["reason"] for x in res)
    for bad in (
        {"response_text": "  ", "object_ids": [a]},
        {"response_text": RESPONSE, "object_ids": [str(uuid.uuid4())]},
        {"response_text": RESPONSE, "object_ids": []},
    ):
        assert client_api.post("/api/v1/detect", bad, format="json").status_code == 400
    assert (
        outsider_api.post(
            "/api/v1/detect", {"response_text": RESPONSE, "object_ids": [a]}, format="json"
        ).status_code
        == 400
    )


# --- A session_id repeated across interactions (SPEC §7), with detection on --------------------


def detected_session(request_id, oid, *, hours, session_id="conv-repeat"):
    """A session that injects ``oid`` and whose response mentions it: the analyser finds a
    REFERENCED, which moves the (object, session_id) tally like an explicit positive signal."""
    return {
        **session(request_id, [(oid, 10)], session_id=session_id, hours=hours),
        "response_text": RESPONSE,
        "detect": True,
    }


def assert_one_tally(oid, records):
    """One tally row for the pair, holding the γ of every detected REFERENCED."""
    gammas = [s["effective_gamma"] for r in records for s in r["signals"] if s.get("detected")]
    assert len(gammas) == len(records)
    row = SessionTally.objects.get(object_id=oid, session_id="conv-repeat")
    assert row.gamma_total == pytest.approx(sum(gammas))
    assert list(row.repeats.values()) == [len(records)]  # one (actor, REFERENCED) key


def test_repeated_session_id_with_detection_single(client_api):
    (a, *_) = make(client_api)
    first = post(client_api, detected_session("rep-1", a, hours=1))
    second = post(client_api, detected_session("rep-2", a, hours=2))
    assert (first.status_code, second.status_code) == (201, 201), second.content
    assert_one_tally(a, [first.json(), second.json()])


def test_repeated_session_id_with_detection_in_a_later_batch(client_api):
    (a, *_) = make(client_api)
    first = post(client_api, detected_session("rep-1", a, hours=1))
    assert first.status_code == 201
    r = client_api.post(
        "/api/v1/feedback-sessions/batch",
        [detected_session("rep-2", a, hours=2), detected_session("rep-3", a, hours=3)],
        format="json",
    )
    assert r.status_code == 207, r.content
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 201]
    assert_one_tally(a, [first.json(), *(x["record"] for x in results)])


def test_repeated_session_id_with_detection_inside_one_batch(client_api):
    (a, *_) = make(client_api)
    r = client_api.post(
        "/api/v1/feedback-sessions/batch",
        [detected_session("rep-1", a, hours=1), detected_session("rep-2", a, hours=2)],
        format="json",
    )
    assert r.status_code == 207, r.content
    results = r.json()["results"]
    assert [x["status"] for x in results] == [201, 201]
    assert_one_tally(a, [x["record"] for x in results])


# --- Response analysis: outside the write transaction, and bounded ------------------------------


@pytest.mark.django_db(transaction=True)
def test_response_analysis_runs_outside_any_transaction(client_api, monkeypatch):
    """The analysis is CPU work on text; inside the write transaction it held the change feed
    back for every namespace (API.md). Pinned structurally: no analysis while a transaction is
    open on the connection, for the single and the batch endpoint."""
    (a, b, _) = make(client_api)
    seen = []
    real = detection.analyse

    def watched(*args, **kwargs):
        seen.append(connection.in_atomic_block)
        return real(*args, **kwargs)

    monkeypatch.setattr(detection, "analyse", watched)
    r = post(client_api, detected_session("out-1", session_id="conv-out-1", oid=a, hours=1))
    assert r.status_code == 201 and r.json()["signals"][0]["detected"] is True
    r = client_api.post(
        "/api/v1/feedback-sessions/batch",
        [
            detected_session("out-2", session_id="conv-out-2", oid=a, hours=2),
            detected_session("out-3", session_id="conv-out-3", oid=b, hours=3),
        ],
        format="json",
    )
    assert [x["status"] for x in r.json()["results"]] == [201, 201]
    assert seen == [False, False, False]


def test_detect_response_text_is_bounded_with_413(client_api):
    (a, *_) = make(client_api)
    limit = detection.MAX_RESPONSE_CHARS
    before = Operation.objects.count()
    over = {**detected_session("big-1", a, hours=1), "response_text": "x" * (limit + 1)}
    r = post(client_api, over)
    assert r.status_code == 413, r.content
    error = r.json()["error"]
    assert error["code"] == "response_text_too_large" and str(limit) in error["message"]
    assert Operation.objects.count() == before
    # the same text without detect is not analysed, so not bounded by the analysis
    assert post(client_api, {**over, "detect": False}).status_code == 201
    at_limit = {**detected_session("big-2", a, hours=2)}
    at_limit["response_text"] = (RESPONSE + " " * limit)[:limit]
    r = post(client_api, at_limit)
    assert r.status_code == 201 and r.json()["signals"][0]["detected"] is True
    # in a batch the item is refused on its own
    r = client_api.post(
        "/api/v1/feedback-sessions/batch",
        [{**over, "request_id": "big-3"}, detected_session("big-4", a, hours=3)],
        format="json",
    )
    results = r.json()["results"]
    assert [x["status"] for x in results] == [413, 201]
    assert results[0]["error"]["code"] == "response_text_too_large"


def test_detect_objects_per_analysis_are_bounded_with_400(client_api):
    limit = detection.MAX_OBJECTS
    ids = make(client_api, [f"fact number {i} about topic {i}" for i in range(limit + 1)])
    body = {
        **session("many-1", [(oid, 10) for oid in ids]),
        "response_text": "fact number 3 about topic 3",
        "detect": True,
    }
    before = Operation.objects.count()
    r = post(client_api, body)
    assert r.status_code == 400, r.content
    assert r.json()["error"]["fields"]["injections"] == [
        f"At most {limit} objects are analysed against one response "
        "(in a session: the injected objects without an explicit signal)."
    ]
    assert Operation.objects.count() == before
    # the bound is on the objects analysed: one with an explicit signal is not analysed
    body["request_id"] = "many-2"
    body["signals"] = [{"object_id": ids[0], "signal_type": "REFERENCED"}]
    r = post(client_api, body)
    assert r.status_code == 201, r.content
    assert sum(1 for s in r.json()["signals"] if s.get("detected")) >= 1


def test_detect_endpoint_is_bounded(client_api):
    (a, *_) = make(client_api)
    limit = detection.MAX_RESPONSE_CHARS
    r = client_api.post(
        "/api/v1/detect", {"response_text": "x" * (limit + 1), "object_ids": [a]}, format="json"
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "response_text_too_large"
    r = client_api.post(
        "/api/v1/detect",
        {
            "response_text": RESPONSE,
            "object_ids": [str(uuid.uuid4())] * (detection.MAX_OBJECTS + 1),
        },
        format="json",
    )
    assert r.status_code == 400 and "object_ids" in r.json()["error"]["fields"]
