"""The response analysis one request may run: a per-request budget (characters × objects), and
retries of stored sessions answered without analysing them again."""

from __future__ import annotations

from unittest import mock

import pytest

from analysis import api as detection
from feedback.models import FeedbackSession
from tests.factories import post, session

pytestmark = pytest.mark.django_db

CONTENTS = [
    "Alice prefers Python for data pipelines",
    "The staging cluster runs PostgreSQL 15 on db-07",
    "Bob's invoices go to finance@bob.example",
]
RESPONSE = "Since Alice prefers Python for data pipelines, here is a pandas example."
#: One detect session below: RESPONSE analysed against its three silent injections.
COST = len(RESPONSE) * 3


def make(api):
    body = [
        {
            "namespace": "support",
            "content": c,
            "epistemic_type": "ASSERTED",
            "ts": "2026-06-01T00:00:00Z",
        }
        for c in CONTENTS
    ]
    return [o["id"] for o in api.post("/api/v1/objects", body, format="json").json()]


def detect_session(request_id, ids, hours=1, detect=True):
    body = session(request_id, [(i, 10) for i in ids], hours=hours)
    if detect:
        body.update(response_text=RESPONSE, detect=True)
    return body


def batch(api, bodies):
    r = api.post("/api/v1/feedback-sessions/batch", bodies, format="json")
    assert r.status_code == 207, r.content
    return r.json()["results"]


def test_a_batch_past_the_analysis_budget_refuses_the_rest_with_413(client_api, settings):
    settings.RMS_ANALYSIS_BUDGET = 2 * COST
    ids = make(client_api)
    bodies = [
        detect_session("b1", ids, 1),
        detect_session("b2", ids, 2),
        detect_session("b3", ids, 3, detect=False),  # nothing to analyse: not counted
        detect_session("b4", ids, 4),
        detect_session("b5", ids, 5),
    ]
    results = batch(client_api, bodies)
    assert [r["status"] for r in results] == [201, 201, 201, 413, 413]
    for refused in results[3:]:
        assert refused["error"]["code"] == "analysis_budget_exceeded"
        assert str(2 * COST) in refused["error"]["message"]
    # The refused items left nothing behind; sent again in a request of their own, they pass.
    assert set(FeedbackSession.objects.values_list("request_id", flat=True)) == {"b1", "b2", "b3"}
    assert [r["status"] for r in batch(client_api, bodies[3:])] == [201, 201]


def test_a_single_session_over_the_budget_is_413_in_the_error_shape(client_api, settings):
    settings.RMS_ANALYSIS_BUDGET = COST - 1
    ids = make(client_api)
    r = post(client_api, detect_session("s1", ids))
    assert r.status_code == 413, r.content
    assert r.json()["error"]["code"] == "analysis_budget_exceeded"
    assert not FeedbackSession.objects.exists()
    settings.RMS_ANALYSIS_BUDGET = COST
    assert post(client_api, detect_session("s1", ids)).status_code == 201


def test_a_retry_of_a_stored_session_is_not_analysed_again(client_api):
    ids = make(client_api)
    body = detect_session("r1", ids)
    with mock.patch.object(detection, "analyse", wraps=detection.analyse) as analyse:
        first = post(client_api, body)
        assert first.status_code == 201, first.content
        assert analyse.call_count == 1
        again = post(client_api, body)
        assert again.status_code == 200 and again.json() == first.json()
        assert analyse.call_count == 1


def test_stored_sessions_in_a_batch_cost_no_analysis_and_no_budget(client_api, settings):
    settings.RMS_ANALYSIS_BUDGET = COST
    ids = make(client_api)
    stored = detect_session("k1", ids, 1)
    assert post(client_api, stored).status_code == 201
    fresh = detect_session("k2", ids, 2)
    with mock.patch.object(detection, "analyse", wraps=detection.analyse) as analyse:
        results = batch(client_api, [stored, fresh, dict(fresh)])
    assert [r["status"] for r in results] == [200, 201, 200]
    assert analyse.call_count == 1  # only k2, once
    assert results[2]["record"] == results[1]["record"]


def test_post_detect_spends_the_same_budget(client_api, settings):
    settings.RMS_ANALYSIS_BUDGET = COST - 1
    ids = make(client_api)
    body = {"response_text": RESPONSE, "object_ids": ids}
    r = client_api.post("/api/v1/detect", body, format="json")
    assert r.status_code == 413, r.content
    assert r.json()["error"]["code"] == "analysis_budget_exceeded"
    settings.RMS_ANALYSIS_BUDGET = COST
    assert client_api.post("/api/v1/detect", body, format="json").status_code == 200


def test_the_default_budget_passes_a_full_batch_of_ordinary_sessions(client_api):
    """500 sessions, each a 3,000-character response against ten silent injections."""
    body = [
        {
            "namespace": "support",
            "content": f"fact {i} about {w}",
            "epistemic_type": "ASSERTED",
            "ts": "2026-06-01T00:00:00Z",
        }
        for i, w in enumerate(("billing refunds deploys latency caches " * 2).split())
    ]
    ids = [o["id"] for o in client_api.post("/api/v1/objects", body, format="json").json()]
    assert len(ids) == 10
    text = (RESPONSE + " ") * (3000 // (len(RESPONSE) + 1))
    bodies = []
    for n in range(500):
        item = detect_session(f"full-{n}", ids, hours=1 + n / 100)
        item["response_text"] = text
        bodies.append(item)
    results = batch(client_api, bodies)
    assert [r["status"] for r in results] == [201] * 500
