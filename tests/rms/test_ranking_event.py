"""The ranking event (``object.ranking``, API.md: a type beyond the v1 list): an injected
object's utility, uses and last use once its session closed, read from the INJECTION_EVENT the
session already writes; delivered only to consumers that name it, on the feed and to webhook
endpoints; and the ranking snapshot (``GET /ranking-state``) beside it."""

from __future__ import annotations

import pytest

from delivery import dispatch, services
from delivery.models import WebhookDelivery
from feedback.models import FeedbackAggregate
from rms import events, policy
from rms.models import Operation
from rms.replay import iso
from tests.factories import follow, make_objects, post, session

# Transactional: on PostgreSQL the feed releases only committed transactions.
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_ranking_event_carries_the_aggregate_after_the_session(client_api):
    a, b = make_objects(client_api, 2)
    start = follow(client_api)[1]
    body = session("r-1", [(a, 10), (b, 10)], [(a, policy.CONFIRMED)], outcome="SUCCESS")
    assert post(client_api, body).status_code == 201
    plain, _ = follow(client_api, after=start)
    assert events.OBJECT_RANKING not in {e["type"] for e in plain}
    named, _ = follow(client_api, after=start, types=events.OBJECT_RANKING)
    assert [e["type"] for e in named] == [events.OBJECT_RANKING] * 2
    ops = {str(o.id): o for o in Operation.objects.filter(op_type="INJECTION_EVENT")}
    for event in named:
        agg = FeedbackAggregate.objects.get(object_id=event["target_id"])
        op = ops[event["id"]]
        assert event["data"] == {
            "utility": agg.utility,
            "uses": agg.uses,
            "last_use_at": iso(agg.last_use_at),
            "version": op.payload["version"],
        }
    used = next(e for e in named if e["target_id"] == a)["data"]
    unused = next(e for e in named if e["target_id"] == b)["data"]
    # SUCCESS moves a used object's utility up, an unused one's down (SPEC §12: EMA 0.9/0.1).
    assert used["uses"] == 1 and used["utility"] == pytest.approx(0.55, abs=1e-12)
    assert unused["uses"] == 0 and unused["last_use_at"] is None
    assert unused["utility"] < 0.5
    # The version is the object's after the injection: below the session's later operations.
    assert used["version"] < client_api.get(f"/api/v1/objects/{a}").json()["version"]


def test_webhook_endpoints_receive_it_only_when_they_name_it(client_api, settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    a, b = make_objects(client_api, 2)
    every, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:9/a")
    named, _ = services.endpoint_create(
        created_by="admin-1",
        url="http://127.0.0.1:9/b",
        event_types=[events.OBJECT_RANKING, events.OBJECT_REINFORCED],
    )
    body = session("r-2", [(a, 10), (b, 10)], [(a, policy.CONFIRMED)], outcome="SUCCESS")
    assert post(client_api, body).status_code == 201
    dispatch.pump()
    types = {
        endpoint.pk: sorted(
            WebhookDelivery.objects.filter(endpoint=endpoint).values_list("event_type", flat=True)
        )
        for endpoint in (every, named)
    }
    assert types[every.pk] == [events.OBJECT_REINFORCED]
    assert types[named.pk] == [
        events.OBJECT_RANKING,
        events.OBJECT_RANKING,
        events.OBJECT_REINFORCED,
    ]


def test_ranking_state_pages_are_exact_at_their_feed_cursor(client_api):
    ids = make_objects(client_api, 5)
    body = session("r-3", [(ids[0], 10)], [(ids[0], policy.CONFIRMED)], outcome="SUCCESS")
    assert post(client_api, body).status_code == 201
    rows, cursor, feed_cursors = [], None, set()
    while True:
        params = {"namespace": "support", "page_size": 2, **({"cursor": cursor} if cursor else {})}
        page = client_api.get("/api/v1/ranking-state", params).json()
        rows += page["results"]
        feed_cursors.add(page["feed_cursor"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(feed_cursors) == 1  # every page names the cursor the first one read
    assert sorted(r["object_id"] for r in rows) == sorted(ids)
    assert [r["object_id"] for r in rows] == sorted(r["object_id"] for r in rows)
    first = next(r for r in rows if r["object_id"] == ids[0])
    assert first["uses"] == 1 and first["utility"] == pytest.approx(0.55, abs=1e-12)
    assert first["reinforcement_boost"] > 0 and first["last_reinforced_at"] is not None
    other = next(r for r in rows if r["object_id"] == ids[1])
    assert (other["uses"], other["utility"], other["last_use_at"]) == (0, 0.5, None)
    assert page["profile"]["weights"]["confidence"] == pytest.approx(0.3)
    assert events.OBJECT_RANKING in page["event_types"]
    # Nothing after the feed cursor: the snapshot already holds everything.
    later, _ = follow(client_api, after=feed_cursors.pop(), types=",".join(page["event_types"]))
    assert later == []
