"""feedback.planner: answers and rows of a call from loaded state, without the database."""

from __future__ import annotations

import pytest
from django.db import transaction

from feedback import ingest
from feedback.models import FeedbackSession
from feedback.planner import Item, SessionPlan
from rms.errors import DomainError
from tests.factories import make_object

pytestmark = pytest.mark.django_db


def body(request_id, objs, signals=(("CONFIRMED", 0),), scope=("support",)):
    return {
        "session_id": f"conv-{request_id}",
        "request_id": request_id,
        "namespace_scope": list(scope),
        "context_budget": 1000,
        "tokens_used": 100,
        "injections": [{"object_id": o.pk, "token_cost": 10} for o in objs],
        "signals": [{"object_id": objs[i].pk, "signal_type": t} for t, i in signals],
    }


def planned(client, items, every=None):
    with transaction.atomic():
        plan = SessionPlan(client, ingest.load_state(client, items))
        return plan, list(plan.sessions(items, every=every))


def test_the_planner_answers_every_item_and_builds_its_rows_without_a_query(
    client_api, other_namespace, django_assert_num_queries
):
    client = client_api.row
    objs = [make_object(client) for _ in range(2)]
    items = [
        Item(body("r1", objs), "h1"),
        Item(body("r1", objs), "h1"),  # the same key and body again in this call
        Item(body("r1", objs), "h2"),  # the same key, another body
        Item(body("r2", objs, scope=("billing",)), "h3"),  # a namespace it may not see
        Item(body("r3", objs, signals=(("UNUSED", 0), ("UNUSED", 0))), "h4"),
    ]
    with transaction.atomic():
        plan = SessionPlan(client, ingest.load_state(client, items))
        with django_assert_num_queries(0):
            (events,) = plan.sessions(items)

    status, record = items[0].result
    assert status == 201
    assert record["injected_object_ids"] == [str(o.pk) for o in objs]
    assert record["unused_ids"] == [str(objs[1].pk)]  # injected, no signal: automatic UNUSED
    assert items[1].result == (200, record) and items[1].record_json == items[0].record_json
    refusals = [(s, e.code) for s, e in (item.result for item in items[2:])]
    assert refusals == [
        (409, "idempotency_mismatch"),
        (403, "forbidden"),
        (400, "validation_error"),
    ]
    assert isinstance(items[4].result[1], DomainError)
    assert items[4].result[1].fields == {
        "signals.1.signal_type": ["At most one UNUSED per object."]
    }

    assert [op.op_type for op in events.ops] == [
        "INJECTION_EVENT",
        "INJECTION_EVENT",
        "FEEDBACK_EVENT",
        "REINFORCE",
        "FEEDBACK_EVENT",
        "FEEDBACK_SESSION",
    ]
    assert (len(events.injections), len(events.signals), len(events.scopes)) == (2, 1, 1)
    assert [s.request_id for s in events.sessions] == ["r1"]
    assert plan.planned == 1 and set(plan.touched) == {o.pk for o in objs}
    assert plan.streak_grew == {objs[1].pk}
    assert not FeedbackSession.objects.exists()  # planning writes nothing


def test_the_planner_hands_out_rows_every_n_sessions(client_api):
    client = client_api.row
    objs = [make_object(client)]
    items = [Item(body(f"r{i}", objs), f"h{i}") for i in range(3)]
    plan, chunks = planned(client, items, every=2)
    assert [len(c.sessions) for c in chunks] == [2, 1]
    assert [s for s, _ in (item.result for item in items)] == [201, 201, 201]


def test_a_stored_session_is_replayed_from_its_record(client_api):
    client = client_api.row
    objs = [make_object(client)]
    first = ingest.record_sessions(client=client, items=[Item(body("r1", objs), "h1")])[0]
    items = [Item(body("r1", objs), "h1"), Item(body("r1", objs), "h2")]
    plan, chunks = planned(client, items)
    assert items[0].result == (200, first[1])
    assert items[1].result[0] == 409
    assert plan.planned == 0 and chunks[0].ops == []
