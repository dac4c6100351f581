"""Signals through the HTTP API: SPEC §2–§5 numbers, RFC-0008 §11 checks, idempotency, errors."""

from __future__ import annotations

import pytest

from feedback.models import FeedbackAggregate
from rms.models import MemoryObject, Operation, SessionTally
from tests.factories import OBJECT_BODY, api_object, api_signal

pytestmark = pytest.mark.django_db


def test_confirmed_reinforces_with_rfc_payload(client_api):
    oid = api_object(client_api)
    r = api_signal(client_api, oid, evidence_ids=["doc-1"])
    assert r.status_code == 201
    op = r.json()["operation"]
    assert op["op_type"] == "REINFORCE" and op["policy_version"] == "confidence_v1"
    p = op["payload"]
    for key in (
        "signal_type",
        "gamma",
        "gamma_effective",
        "correlation_discount_applied",
        "confidence_before",
        "confidence_after",
        "salience_before",
        "salience_after",
        "session_id",
        "session_gamma_total",
        "signal_source",
        "policy_version",
        "detection_method",
        "reliability_class",
        "reliability_discount",
        "repeat_index",
        "cap_applied",
        "ceiling_applied",
        "provenance_missing",
        "evidence_ids",
        "gamma_before_cap",
    ):
        assert key in p, key
    assert p["confidence_after"] == pytest.approx(0.915, abs=1e-15)
    assert p["salience_after"] == 0.5375 and p["signal_source"] == "user-9"
    obj = r.json()["object"]
    assert obj["confidence"] == p["confidence_after"] and obj["reinforcement_count"] == 1
    assert obj["evidence_ids"] == ["doc-1"] and obj["reinforcement_boost"] == 0.15
    assert obj["aggregate"]["total_confirmed"] == 1
    assert obj["aggregate"]["lifetime_gamma_applied"] == 0.15


def test_thousand_confirmed_never_exceed_097_through_the_api(client_api):
    oid = api_object(client_api)
    top = 0.0
    for i in range(1000):
        r = api_signal(client_api, oid, session_id=f"s-{i}")
        top = max(top, r.json()["operation"]["payload"]["confidence_after"])
    assert top == 0.97
    assert MemoryObject.objects.get(pk=oid).confidence == 0.97


def test_session_cap_through_the_api(client_api):
    oid = api_object(client_api, epistemic_type="INFERRED")
    effective = [
        api_signal(client_api, oid, actor_id=f"user-{i}").json()["operation"]["payload"][
            "gamma_effective"
        ]
        for i in range(4)
    ]
    assert effective[:2] == [0.15, 0.15]
    assert effective[2] == pytest.approx(0.10, abs=1e-12) and effective[3] == 0.0
    tally = SessionTally.objects.get(object_id=oid, session_id="s-1")
    assert tally.gamma_total == pytest.approx(0.40, abs=1e-12)
    r = api_signal(client_api, oid, session_id="s-2")
    assert r.json()["operation"]["payload"]["gamma_effective"] == 0.15


def test_repeats_divided_by_n(client_api):
    oid = api_object(client_api)
    gammas = [
        api_signal(client_api, oid).json()["operation"]["payload"]["gamma_effective"]
        for _ in range(3)
    ]
    assert gammas[0] == 0.15 and gammas[1] == 0.075 and gammas[2] == pytest.approx(0.05, abs=1e-15)


@pytest.mark.parametrize(
    ("obj_evidence", "sig_evidence", "actor_type", "gamma"),
    [
        ([], [], "AI_AGENT", 0.06),
        (["doc-1"], ["doc-1"], "AI_AGENT", 0.06),
        (["doc-1"], ["doc-2"], "AI_AGENT", 0.15),
        ([], [], "HUMAN_USER", 0.15),
    ],
)
def test_independence_discount_through_the_api(
    client_api, obj_evidence, sig_evidence, actor_type, gamma
):
    oid = api_object(client_api, evidence_ids=obj_evidence)
    p = api_signal(client_api, oid, actor_type=actor_type, evidence_ids=sig_evidence).json()[
        "operation"
    ]["payload"]
    assert p["gamma_effective"] == pytest.approx(gamma, abs=1e-15)
    assert p["provenance_missing"] is (actor_type == "AI_AGENT" and not sig_evidence)


def test_correlated_agent_pair_is_discounted(client_api):
    """Two agents citing the same source are not independent confirmation (RFC-0008 §5)."""
    oid = api_object(client_api, evidence_ids=["doc-1"])
    a = api_signal(
        client_api, oid, actor_id="agent-a", actor_type="AI_AGENT", evidence_ids=["doc-7"]
    )
    b = api_signal(
        client_api, oid, actor_id="agent-b", actor_type="AI_AGENT", evidence_ids=["doc-7"]
    )
    assert a.json()["operation"]["payload"]["gamma_effective"] == 0.15
    assert b.json()["operation"]["payload"]["correlation_discount_applied"] is True
    assert b.json()["operation"]["payload"]["gamma_effective"] == pytest.approx(0.06, abs=1e-15)


def test_corrected_floor_through_the_api(admin_api, client_api):
    oid = admin_api.post(
        "/api/v1/objects",
        {**OBJECT_BODY, "epistemic_type": "ASSERTED", "confidence": 0.06},
        format="json",
    ).json()["id"]
    r = api_signal(client_api, oid, signal_type="CORRECTED")
    p = r.json()["operation"]["payload"]
    assert r.json()["operation"]["op_type"] == "PENALTY"
    assert p["confidence_after"] == 0.05 and p["floor_applied"] is True
    for _ in range(5):
        api_signal(client_api, oid, signal_type="CORRECTED")
    assert MemoryObject.objects.get(pk=oid).confidence == 0.05
    agg = FeedbackAggregate.objects.get(object_id=oid)
    assert agg.total_corrected == 6 and agg.last_negative_signal is not None


def test_detection_discount_and_default_method(client_api):
    oid = api_object(client_api)
    p = api_signal(client_api, oid, signal_type="REFERENCED").json()["operation"]["payload"]
    assert p["detection_method"] == "response_analysis" and p["reliability_class"] == "LOW"
    assert p["gamma_effective"] == 0.04


def test_unused_records_and_changes_nothing(client_api):
    oid = api_object(client_api)
    r = api_signal(client_api, oid, signal_type="UNUSED")
    assert r.status_code == 201 and r.json()["effect"] == "unused"
    assert r.json()["operation"]["op_type"] == "FEEDBACK_EVENT"
    assert (
        r.json()["object"]["confidence"] == 0.9 and r.json()["object"]["reinforcement_count"] == 0
    )
    assert r.json()["object"]["aggregate"]["total_unused"] == 1


def test_deprecated_object_signal_is_rejected_not_an_error(client_api, admin_api):
    oid = api_object(client_api)
    admin_api.post(
        f"/api/v1/objects/{oid}/transition", {"to": "DEPRECATED", "reason": "wrong"}, format="json"
    )
    r = api_signal(client_api, oid)
    assert r.status_code == 201 and r.json()["effect"] == "rejected"
    assert "DEPRECATED" in r.json()["operation"]["payload"]["reason"]
    assert r.json()["object"]["confidence"] == 0.9
    assert not SessionTally.objects.filter(object_id=oid).exists()
    penalty = api_signal(client_api, oid, signal_type="CORRECTED")
    assert penalty.json()["effect"] == "penalized"


@pytest.mark.parametrize(
    ("patch", "code", "field"),
    [
        ({"signal_type": "LOVED"}, "validation_error", "signal_type"),
        ({"signal_type": "IGNORED_REPEATEDLY"}, "system_only_signal", "signal_type"),
        (
            {"detection_method": "injection_tracking"},
            "system_only_detection_method",
            "detection_method",
        ),
        ({"detection_method": "telepathy"}, "validation_error", "detection_method"),
        ({"actor_type": "ROBOT"}, "validation_error", "actor_type"),
        ({"session_id": ""}, "validation_error", "session_id"),
        ({"evidence_ids": [1, {"a": 2}]}, "validation_error", "evidence_ids.1"),
        ({"ts": "2999-01-01T00:00:00Z"}, "ts_in_future", "ts"),
        ({"extra": 1}, "validation_error", "extra"),
    ],
)
def test_signal_errors_write_nothing(client_api, patch, code, field):
    oid = api_object(client_api)
    r = api_signal(client_api, oid, **patch)
    assert r.status_code == 400, r.content
    assert r.json()["error"]["code"] == code and field in r.json()["error"]["fields"]
    assert Operation.objects.filter(target_id=oid).count() == 1
    assert not FeedbackAggregate.objects.filter(object_id=oid).exists()


def test_signal_ts_out_of_order_is_409(client_api):
    oid = api_object(client_api, ts="2026-05-01T00:00:00Z")
    assert api_signal(client_api, oid, ts="2026-05-03T00:00:00Z").status_code == 201
    r = api_signal(client_api, oid, ts="2026-05-02T00:00:00Z")
    assert r.status_code == 409 and r.json()["error"]["code"] == "ts_out_of_order"
    assert Operation.objects.filter(target_id=oid).count() == 3


def test_signal_roles(operator_api, client_api):
    oid = api_object(client_api)
    assert api_signal(operator_api, oid).status_code == 403


def test_request_id_makes_a_signal_idempotent(client_api):
    oid = api_object(client_api)
    key = "6f1c2a5e-8d4b-4e7a-9c3f-2b1d0e9a8c7b"
    first = api_signal(client_api, oid, request_id=key)
    again = api_signal(client_api, oid, request_id=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    assert Operation.objects.filter(target_id=oid, op_type="REINFORCE").count() == 1
    changed = api_signal(client_api, oid, request_id=key, signal_type="REFERENCED")
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "idempotency_mismatch"
    assert MemoryObject.objects.get(pk=oid).reinforcement_count == 1


def test_request_id_reused_on_another_object_is_409(client_api):
    """The key covers the target in the path: the same body sent to another object is a
    changed request, never the first object's answer with the second object left unchanged."""
    a, b = api_object(client_api), api_object(client_api)
    key = "0b7e8c1a-3f2d-4c5b-9a8e-7d6c5b4a3f2e"
    first = api_signal(client_api, a, request_id=key)
    assert first.status_code == 201
    other = api_signal(client_api, b, request_id=key)
    assert other.status_code == 409, other.content
    assert other.json()["error"]["code"] == "idempotency_mismatch"
    assert MemoryObject.objects.get(pk=b).reinforcement_count == 0
    assert not Operation.objects.filter(target_id=b, op_type="FEEDBACK_EVENT").exists()
    again = api_signal(client_api, a, request_id=key)
    assert again.status_code == 200 and again.json() == first.json()
