"""Admin actions from the dashboard: each is one service call, on record with its reason and the
human who clicked it (SPEC §1, §6)."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages

from rms.models import MemoryObject, Operation
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db


def last_op(obj):
    return Operation.objects.filter(target_id=obj.pk).latest("seq")


def messages_of(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_pin_unpin_round_trip_writes_the_operations(admin, history):
    obj = history.objects[2]
    c = login(admin)
    response = c.post(
        f"/objects/{obj.pk}/pin/", {"reason": "verified by phone", "confidence": "0.9"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/objects/{obj.pk}/"
    obj.refresh_from_db()
    assert obj.pinned and obj.confidence == pytest.approx(0.9)
    pin = last_op(obj)
    assert pin.op_type == "PIN"
    assert (pin.actor_id, pin.actor_type) == ("ada-admin", "HUMAN_USER")
    assert pin.payload["reason"] == "verified by phone"
    assert pin.payload["confidence_requested"] == 0.9
    assert pin.state["pinned"] is True

    assert messages_of(response) == ["Pinned at confidence 0.900. “Alice prefers Python 2”"]
    page = c.get(response["Location"])
    assert "Pinned at confidence 0.900." in page.content.decode()

    response = c.post(f"/objects/{obj.pk}/unpin/", {"reason": "no longer sure"})
    assert response.status_code == 302
    obj.refresh_from_db()
    assert not obj.pinned
    unpin = last_op(obj)
    assert unpin.op_type == "UNPIN" and unpin.payload["reason"] == "no longer sure"
    assert unpin.payload["confidence_before"] == pytest.approx(0.9)


def test_pin_without_confidence_keeps_the_value(admin, history):
    obj = history.objects[2]
    before = obj.confidence
    login(admin).post(f"/objects/{obj.pk}/pin/", {"reason": "keep it", "confidence": ""})
    obj.refresh_from_db()
    assert obj.pinned and obj.confidence == pytest.approx(before)


def test_deprecate_is_an_epistemic_transition_with_its_reason(admin, history):
    obj = history.objects[1]
    response = login(admin).post(f"/objects/{obj.pk}/deprecate/", {"reason": "stale"})
    assert response.status_code == 302
    obj.refresh_from_db()
    assert obj.epistemic_type == "DEPRECATED"
    op = last_op(obj)
    assert op.op_type == "EPISTEMIC_TRANSITION"
    assert op.payload == {
        "from": "ASSERTED",
        "to": "DEPRECATED",
        "reason": "stale",
        "confidence_before": op.payload["confidence_before"],
        "confidence_after": op.payload["confidence_after"],
    }
    assert op.actor_id == "ada-admin"


def test_a_missing_reason_writes_nothing_and_says_why(admin, history):
    obj = history.objects[0]
    before = Operation.objects.filter(target_id=obj.pk).count()
    response = login(admin).post(f"/objects/{obj.pk}/deprecate/", {"reason": "  "})
    assert response.status_code == 302
    assert Operation.objects.filter(target_id=obj.pk).count() == before
    assert any("reason" in m for m in messages_of(response))


def test_a_refused_action_is_reported_not_raised(admin, history):
    obj = history.objects[0]
    c = login(admin)
    c.post(f"/objects/{obj.pk}/deprecate/", {"reason": "wrong"})
    before = Operation.objects.filter(target_id=obj.pk).count()
    response = c.post(f"/objects/{obj.pk}/pin/", {"reason": "too late"})
    assert response.status_code == 302
    assert Operation.objects.filter(target_id=obj.pk).count() == before
    assert any("DEPRECATED" in m for m in messages_of(response))


def test_pin_above_the_type_limit_is_refused(admin, history):
    obj = history.objects[0]  # ASSERTED: pin limit min(0.97, 0.92)
    response = login(admin).post(f"/objects/{obj.pk}/pin/", {"reason": "x", "confidence": "0.99"})
    obj.refresh_from_db()
    assert not obj.pinned
    assert any("0.92" in m for m in messages_of(response))


def test_actions_redirect_back_to_a_local_next_only(admin, history):
    obj = history.objects[0]
    c = login(admin)
    local = c.post(
        f"/objects/{obj.pk}/pin/", {"reason": "x", "next": "/review/?namespace=support&page=2"}
    )
    assert local["Location"] == "/review/?namespace=support&page=2"
    evil = c.post(f"/objects/{obj.pk}/unpin/", {"reason": "x", "next": "https://evil.example/"})
    assert evil["Location"] == f"/objects/{obj.pk}/"


def test_bulk_deprecate_writes_one_transition_per_object(admin, history):
    ids = [str(o.pk) for o in history.objects[:2]]
    response = login(admin).post(
        "/review/deprecate/",
        {"ids": ids, "reason": "renamed product", "next": "/review/?namespace=support"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/review/?namespace=support"
    ops = Operation.objects.filter(op_type="EPISTEMIC_TRANSITION").order_by("seq")
    assert [str(op.target_id) for op in ops] == ids
    assert all(op.payload["reason"] == "renamed product" for op in ops)
    assert all((op.actor_id, op.actor_type) == ("ada-admin", "HUMAN_USER") for op in ops)
    assert set(
        MemoryObject.objects.filter(pk__in=ids).values_list("epistemic_type", flat=True)
    ) == {"DEPRECATED"}
    assert "Deprecated 2 objects." in messages_of(response)


def test_bulk_deprecate_reports_the_objects_it_could_not_deprecate(admin, history):
    a, b = history.objects[:2]
    c = login(admin)
    c.post(f"/objects/{a.pk}/deprecate/", {"reason": "first"})
    response = c.post("/review/deprecate/", {"ids": [str(a.pk), str(b.pk)], "reason": "again"})
    msgs = messages_of(response)
    assert "Deprecated 1 object." in msgs
    assert any(m.startswith("Not deprecated") and str(a.pk)[:8] in m for m in msgs)
    assert Operation.objects.filter(op_type="EPISTEMIC_TRANSITION").count() == 2


def test_bulk_deprecate_needs_ids_and_a_reason(admin, history):
    c = login(admin)
    c.post("/review/deprecate/", {"reason": "nothing selected"})
    c.post("/review/deprecate/", {"ids": [str(history.objects[0].pk)]})
    c.post("/review/deprecate/", {"ids": ["not-a-uuid"], "reason": "x"})
    assert not Operation.objects.filter(op_type="EPISTEMIC_TRANSITION").exists()
