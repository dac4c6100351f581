"""Feedback sessions through the API (SPEC §7, §8, §10–§12): hand-computed scenarios."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine

from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent, SignalRecord
from rms.models import MemoryObject, Operation
from tests.factories import T0, make_objects, post, session

pytestmark = pytest.mark.django_db


@pytest.fixture
def scenario(client_api):
    """Three sessions over objects A, B, C (all ASSERTED 0.75, salience 0.5)."""
    a, b, c = make_objects(client_api)
    human = {"actor_type": "HUMAN_USER", "actor_id": "user-1"}
    r1 = post(
        client_api,
        session(
            "r1",
            [(a, 100), (b, 50), (c, 30)],
            [(a, "CONFIRMED", human), (b, "CORRECTED", human)],
            outcome="SUCCESS",
            hours=1,
        ),
    )
    r2 = post(
        client_api,
        session("r2", [(a, 100), (c, 30)], [(a, "REFERENCED")], outcome="FAILED", hours=2),
    )
    r3 = post(client_api, session("r3", [(c, 30)], budget=500, hours=3))
    assert [r.status_code for r in (r1, r2, r3)] == [201, 201, 201]
    return a, b, c, (r1.json(), r2.json(), r3.json())


def agg(oid) -> FeedbackAggregate:
    return FeedbackAggregate.objects.get(object_id=oid)


def test_session_record_shape(scenario):
    a, b, c, (r1, r2, r3) = scenario
    assert r1["injected_object_ids"] == [a, b, c]
    assert r1["unused_ids"] == [c]
    assert [s["signal_type"] for s in r1["signals"]] == ["CONFIRMED", "CORRECTED"]
    confirmed, corrected = r1["signals"]
    assert confirmed["applied_gamma"] == 0.15 and confirmed["effective_gamma"] == 0.15
    assert confirmed["reliability_class"] == "HIGH" and confirmed["effect"] == "reinforced"
    assert corrected["applied_delta"] == 0.25 and corrected["effective_delta"] == 0.25
    assert r2["signals"][0]["effective_gamma"] == 0.04  # response_analysis discount
    assert r1["session_str_mean"] == pytest.approx((0.5 / 100 + 0.5 / 50 + 0.5 / 30) / 3, abs=1e-15)
    assert r3["unused_ids"] == [c] and r3["outcome"] is None


def test_object_a_used_twice(scenario):
    a, *_ = scenario
    obj = MemoryObject.objects.get(pk=a)
    assert obj.confidence == pytest.approx(0.75 + 0.15 * 0.25 + 0.04 * (1 - 0.7875), abs=1e-15)
    g = agg(a)
    assert (g.total_injections, g.total_confirmed, g.total_referenced, g.total_unused) == (
        2,
        1,
        1,
        0,
    )
    assert g.usage_ratio == 1.0 and g.unused_streak == 0 and g.uses == 2
    assert g.lifetime_gamma_applied == 0.15 + 0.04
    assert g.utility == 0.9 * (0.9 * 0.5 + 0.1 * 1.0) + 0.1 * 0.0  # SUCCESS then FAILED
    assert g.last_positive_signal == T0 + timedelta(hours=2)


def test_object_b_corrected(scenario):
    _, b, *_ = scenario
    assert MemoryObject.objects.get(pk=b).confidence == 0.5625
    g = agg(b)
    assert (g.total_injections, g.total_corrected, g.usage_ratio, g.unused_streak) == (1, 1, 0.0, 0)
    assert g.lifetime_delta_applied == 0.25
    assert g.utility == 0.49  # not used with SUCCESS: min(0.5, 0.95·0.5 + 0.015)
    assert g.last_negative_signal == T0 + timedelta(hours=1)


def test_object_c_never_used(scenario):
    *_, c, _ = scenario
    obj = MemoryObject.objects.get(pk=c)
    assert (obj.confidence, obj.salience_base, obj.reinforcement_count) == (0.75, 0.5, 0)
    g = agg(c)
    assert (g.total_injections, g.total_unused, g.usage_ratio, g.unused_streak) == (3, 3, 0.0, 3)
    assert g.utility == 0.95 * 0.49 + 0.05 * 0.3  # 0.49, then 0.4805; no outcome in r3: unchanged
    assert g.uses == 0 and g.last_use_at is None


def test_metrics_default_to_the_last_24_hours(scenario, client_api):
    """With neither ``since`` nor ``until`` the window is the trailing 24 h (as the alerts and
    the overview read it), and the answer says which."""
    with time_machine.travel(T0 + timedelta(hours=5), tick=False):
        m = client_api.get("/api/v1/metrics?namespace=support").json()
    assert m["window"] == {
        "since": "2026-05-31T05:00:00.000000+00:00",
        "until": "2026-06-01T05:00:00.000000+00:00",
    }
    v = {k: x["value"] for k, x in m["metrics"].items()}
    assert v["mean_usage_ratio"] == pytest.approx(1 / 3, abs=1e-15)
    assert v["high_correction_rate"] == pytest.approx(1 / 3, abs=1e-15)
    assert v["budget_waste_ratio"] == pytest.approx((50 + 30 * 3) / 2500, abs=1e-15)
    assert v["unused_injection_rate"] == 0.5
    states = {k: x["state"] for k, x in m["metrics"].items()}
    assert states == {
        "mean_usage_ratio": "ok",
        "high_correction_rate": "alert",
        "budget_waste_ratio": "ok",
        "unused_injection_rate": "ok",
    }
    assert m["metrics"]["high_correction_rate"]["threshold"] == 0.1
    assert {w["code"] for w in m["warnings"]} == {"systematic_extraction_errors"}
    # A day later the sessions have left the window; usage ratios are lifetime values.
    with time_machine.travel(T0 + timedelta(hours=28), tick=False):
        m = client_api.get("/api/v1/metrics?namespace=support").json()["metrics"]
    assert {k: x["state"] for k, x in m.items()} == {
        "mean_usage_ratio": "ok",
        "high_correction_rate": "no_data",
        "budget_waste_ratio": "no_data",
        "unused_injection_rate": "no_data",
    }
    # All time: a ``since`` before the first session.
    m = client_api.get(
        "/api/v1/metrics", {"namespace": "support", "since": "1970-01-01T00:00:00Z"}
    ).json()
    assert m["window"]["until"] is None
    assert m["metrics"]["unused_injection_rate"]["value"] == 0.5


def test_metrics_window(scenario, client_api):
    since = (T0 + timedelta(hours=2)).isoformat()
    m = client_api.get("/api/v1/metrics", {"namespace": "support", "since": since}).json()
    v = {k: x["value"] for k, x in m["metrics"].items()}
    assert v["high_correction_rate"] == 0.0
    assert v["budget_waste_ratio"] == pytest.approx(60 / 1500, abs=1e-15)
    assert v["unused_injection_rate"] == pytest.approx(2 / 3, abs=1e-15)
    assert v["mean_usage_ratio"] == pytest.approx(1 / 3, abs=1e-15)  # lifetime values


def test_metrics_thresholds_per_namespace(scenario, client_api, namespace):
    namespace.alert_thresholds = {"unused_injection_rate": 0.4}
    namespace.save()
    with time_machine.travel(T0 + timedelta(hours=5), tick=False):
        m = client_api.get("/api/v1/metrics?namespace=support").json()["metrics"]
    assert m["unused_injection_rate"]["threshold"] == 0.4
    assert m["unused_injection_rate"]["state"] == "alert"


def test_metrics_without_data_are_null(client_api):
    m = client_api.get("/api/v1/metrics?namespace=support").json()["metrics"]
    assert all(x["value"] is None and x["state"] == "no_data" for x in m.values())


def test_metrics_access(client_api, outsider_api, operator_api):
    assert outsider_api.get("/api/v1/metrics?namespace=support").status_code == 403
    assert operator_api.get("/api/v1/metrics?namespace=support").status_code == 200
    assert client_api.get("/api/v1/metrics").status_code == 400
    assert client_api.get("/api/v1/metrics?namespace=support&since=bad").status_code == 400


def test_session_detail_and_scope(scenario, client_api, outsider_api, operator_api):
    *_, (r1, _, _) = scenario
    assert client_api.get(f"/api/v1/feedback-sessions/{r1['id']}").json() == r1
    assert operator_api.get(f"/api/v1/feedback-sessions/{r1['id']}").status_code == 200
    assert outsider_api.get(f"/api/v1/feedback-sessions/{r1['id']}").status_code == 404
    assert client_api.get(f"/api/v1/feedback-sessions/{uuid.uuid4()}").status_code == 404
    assert client_api.get("/api/v1/feedback-sessions/nope").status_code == 404


def test_operations_and_chains(scenario):
    a, b, c, (r1, _, _) = scenario
    ops = list(
        Operation.objects.filter(target_id=c).order_by("seq").values_list("op_type", flat=True)
    )
    assert ops == ["OBJECT_CREATED"] + ["INJECTION_EVENT", "FEEDBACK_EVENT"] * 3
    session_ops = Operation.objects.filter(target_id=r1["id"])
    assert [o.op_type for o in session_ops] == ["FEEDBACK_SESSION"]
    assert FeedbackSession.objects.get(pk=r1["id"]).head_hash == session_ops[0].hash
    auto = Operation.objects.filter(target_id=c, op_type="FEEDBACK_EVENT")
    assert [o.payload["detection_method"] for o in auto] == ["injection_tracking"] * 3
    assert {o.payload["effect"] for o in auto} == {"unused"}
    # only signals clients sent get a SignalRecord row; automatic UNUSED live in the log
    assert not SignalRecord.objects.filter(object_id=c).exists()
    assert SignalRecord.objects.filter(object_id=a).count() == 2
    # facts-only operations store no state; state-changing ones do
    stored = dict(Operation.objects.filter(target_id=a).values_list("op_type", "state__version"))
    assert stored["REINFORCE"] is not None and stored["INJECTION_EVENT"] is None
    assert InjectionEvent.objects.filter(object_id=c, ended_unused=True).count() == 3


def test_client_sent_unused_replaces_the_automatic_one(client_api):
    (a,) = make_objects(client_api, 1)
    r = post(client_api, session("u1", [(a, 10)], [(a, "UNUSED")]))
    assert r.status_code == 201 and r.json()["unused_ids"] == [a]
    assert SignalRecord.objects.filter(object_id=a).count() == 1
    assert agg(a).total_unused == 1 and agg(a).unused_streak == 1


def test_signal_on_object_not_injected(client_api):
    a, b = make_objects(client_api, 2)
    r = post(client_api, session("n1", [(a, 10)], [(b, "CONTRADICTED_BY_OBSERVATION")]))
    assert r.status_code == 201 and r.json()["injected_object_ids"] == [a]
    assert agg(b).total_injections == 0 and agg(b).lifetime_delta_applied == 0.2


def test_cap_and_repeat_count_span_interactions_of_one_conversation(client_api):
    (a,) = make_objects(client_api, 1)
    human = {"actor_type": "HUMAN_USER", "actor_id": "u"}
    gammas = []
    for i in range(4):
        r = post(
            client_api,
            session(
                f"c{i}",
                [(a, 10)],
                [(a, "CONFIRMED", {**human, "actor_id": f"u{i}"})],
                hours=1 + i,
                session_id="conv-same",
            ),
        )
        gammas.append(r.json()["signals"][0]["effective_gamma"])
    assert gammas[:2] == [0.15, 0.15] and gammas[2] == pytest.approx(0.1, abs=1e-12)
    assert gammas[3] == 0.0


def test_loop_control_injection_alone_raises_nothing(client_api):
    """An object injected 100 times with no positive signal gains nothing (SPEC §11)."""
    a, b = make_objects(client_api, 2)
    rank = lambda: {  # noqa: E731
        r["object_id"]: r
        for r in client_api.post(
            "/api/v1/rank",
            {
                "namespace": "support",
                "candidates": [
                    {"object_id": a, "similarity": 0.5},
                    {"object_id": b, "similarity": 0.5},
                ],
            },
            format="json",
        ).json()["results"]
    }
    before = rank()
    bodies = [session(f"loop{i}", [(a, 40)], outcome="SUCCESS", hours=1) for i in range(100)]
    for i in range(0, 100, 50):
        r = client_api.post("/api/v1/feedback-sessions/batch", bodies[i : i + 50], format="json")
        assert {x["status"] for x in r.json()["results"]} == {201}
    obj = MemoryObject.objects.get(pk=a)
    assert (obj.confidence, obj.salience_base, obj.reinforcement_count) == (0.75, 0.5, 0)
    g = agg(a)
    assert g.total_injections == 100 and g.unused_streak == 100 and g.uses == 0
    assert g.utility < 0.5
    after = rank()
    assert after[a]["score"] < before[a]["score"]
    assert after[a]["utility"] < after[b]["utility"] and after[a]["hotness"] == after[b]["hotness"]


def test_rank_scores(client_api, namespace):
    a, b = make_objects(client_api, 2)
    post(client_api, session("rk", [(a, 10), (b, 10)], [(a, "CONFIRMED")], outcome="SUCCESS"))
    res = client_api.post(
        "/api/v1/rank",
        {
            "namespace": "support",
            "candidates": [
                {"object_id": a, "similarity": 0.2},
                {"object_id": b, "similarity": 0.9},
            ],
        },
        format="json",
    ).json()["results"]
    by = {r["object_id"]: r for r in res}
    assert by[a]["utility"] == 0.55 and by[b]["utility"] == 0.49
    assert by[a]["score"] == pytest.approx(
        0.45 * 0.2 + 0.30 * by[a]["hotness"] + 0.25 * 0.55 + 0.30 * by[a]["confidence"],
        abs=1e-15,
    )
    assert [r["object_id"] for r in res] == sorted(by, key=lambda k: -by[k]["score"])
    namespace.weights = {"similarity": 1.0, "hotness": 0.0, "utility": 0.0}
    namespace.save()
    res = client_api.post(
        "/api/v1/rank",
        {"namespace": "support", "candidates": [{"object_id": a, "similarity": 0.2}]},
        format="json",
    ).json()["results"]
    assert res[0]["score"] == 0.2


def test_rank_errors(client_api, outsider_api):
    (a,) = make_objects(client_api, 1)
    body = {"namespace": "support", "candidates": [{"object_id": a, "similarity": 0.5}]}
    assert outsider_api.post("/api/v1/rank", body, format="json").status_code == 403
    bad = {
        "namespace": "support",
        "candidates": [{"object_id": str(uuid.uuid4()), "similarity": 0.5}],
    }
    assert client_api.post("/api/v1/rank", bad, format="json").status_code == 400
    nan = {"namespace": "support", "candidates": [{"object_id": a, "similarity": "NaN"}]}
    assert client_api.post("/api/v1/rank", nan, format="json").status_code == 400


def test_review_queue(client_api, operator_api, admin_api):
    a, b, c = make_objects(client_api, 3)
    bodies = [
        session(f"q{i}", [(a, 10), (b, 10), (c, 10)], [(b, "REFERENCED")] if i < 3 else [], hours=1)
        for i in range(25)
    ]
    client_api.post("/api/v1/feedback-sessions/batch", bodies, format="json")
    queue = operator_api.get("/api/v1/review-queue?namespace=support").json()
    assert [o["id"] for o in queue["results"]] == sorted([a, c])  # b: 3/25 = 0.12 ≥ 0.10
    assert queue["results"][0]["aggregate"]["total_injections"] == 25
    admin_api.post(
        f"/api/v1/objects/{a}/transition", {"to": "DEPRECATED", "reason": "noise"}, format="json"
    )
    assert [
        o["id"]
        for o in operator_api.get("/api/v1/review-queue?namespace=support").json()["results"]
    ] == [c]
    assert client_api.get("/api/v1/review-queue?namespace=support").status_code == 403


def test_export_csv(scenario, client_api, outsider_api):
    a, *_ = scenario
    r = client_api.get("/api/v1/export/sessions.csv?namespace=support")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    lines = b"".join(r.streaming_content).decode().splitlines()
    assert lines[0].startswith("id,session_id,request_id") and len(lines) == 4
    r = client_api.get("/api/v1/export/aggregates.csv?namespace=support")
    lines = b"".join(r.streaming_content).decode().splitlines()
    assert len(lines) == 4 and any(line.startswith(a) for line in lines)
    assert outsider_api.get("/api/v1/export/aggregates.csv?namespace=support").status_code == 403
    assert client_api.get("/api/v1/export/other.csv?namespace=support").status_code == 404
