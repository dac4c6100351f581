"""The profile event (``namespace.profile_changed``, a type beyond the v1 list): a PATCH of a
namespace's retrieval ``weights`` or rules writes a PROFILE_CHANGED operation on the
namespace's own chain in the same transaction, carrying the profile as ``/rank`` answers it;
delivered only to consumers that name it, on the feed and to webhook endpoints; the chain
still verifies."""

from __future__ import annotations

import pytest

from delivery import dispatch, services
from delivery.models import WebhookDelivery
from rms import events
from rms.models import Namespace, Operation
from rms.verification import verify_chain_all, verify_replay_all
from tests.factories import follow, make_objects

pytestmark = pytest.mark.django_db(transaction=True)

WEIGHTS = {"similarity": 0.2, "hotness": 0.1, "utility": 0.3, "confidence": 0.15}


def rank_profile(api, oid):
    body = {"namespace": "support", "candidates": [{"object_id": oid, "similarity": 0.5}]}
    response = api.post("/api/v1/rank", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["profile"]


def test_a_patch_of_the_profile_is_an_opt_in_event_with_the_rank_profile(
    client_api, admin_api, outsider_api
):
    (oid,) = make_objects(client_api, 1)
    start = follow(client_api)[1]
    before = rank_profile(client_api, oid)
    body = {"weights": WEIGHTS, "retrieval": {"confidence_floor": 0.25, "conditions": "any"}}
    response = admin_api.patch("/api/v1/namespaces/support", body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["weights"] == WEIGHTS
    after = rank_profile(client_api, oid)
    assert after != before
    assert after["weights"]["salience"] == 0.0 and after["confidence_floor"] == 0.25

    plain, _ = follow(client_api, after=start)
    assert events.NAMESPACE_PROFILE_CHANGED not in {e["type"] for e in plain}
    named, _ = follow(client_api, after=start, types=events.NAMESPACE_PROFILE_CHANGED)
    assert [e["type"] for e in named] == [events.NAMESPACE_PROFILE_CHANGED]
    # Another namespace's client never sees it.
    assert follow(outsider_api, after=start, types=events.NAMESPACE_PROFILE_CHANGED)[0] == []
    ns = Namespace.objects.get(name="support")
    event = named[0]
    assert (event["target_type"], event["target_id"]) == ("namespace", str(ns.uid))
    assert event["op_type"] == "PROFILE_CHANGED" and event["data"] == after
    op = Operation.objects.get(id=event["id"])
    assert op.hash == ns.head_hash and op.actor_id == "admin-1"

    # The same profile again, or a retention change alone, changes no profile: no event.
    for again in (body, {"retention_days": 30}):
        response = admin_api.patch("/api/v1/namespaces/support", again, format="json")
        assert response.status_code == 200
    assert len(follow(client_api, after=start, types=events.NAMESPACE_PROFILE_CHANGED)[0]) == 1
    # Rules alone: the event carries the whole profile, weights kept.
    rules = {"retrieval": {"confidence_floor": 0.5}}
    assert admin_api.patch("/api/v1/namespaces/support", rules, format="json").status_code == 200
    last = follow(client_api, after=start, types=events.NAMESPACE_PROFILE_CHANGED)[0][-1]
    assert last["data"] == rank_profile(client_api, oid)
    assert last["data"]["weights"] == after["weights"]
    assert last["data"]["conditions"] == "not_refuted"

    report = verify_chain_all()
    assert report["ok"], report["mismatches"]
    assert report["checked"] >= 2
    replayed = verify_replay_all()
    assert replayed["ok"], replayed["mismatches"]


def test_bad_patches_are_400_and_write_nothing(client_api, admin_api):
    ops = Operation.objects.count()
    for bad in ({}, {"weights": {"speed": 0.5}}, {"weights": {"utility": 2}},
                {"retrieval": {"conditions": "sometimes"}}, {"colour": "red"}):  # fmt: skip
        response = admin_api.patch("/api/v1/namespaces/support", bad, format="json")
        assert response.status_code == 400, (bad, response.content)
        assert "error" in response.json()
    response = client_api.patch("/api/v1/namespaces/support", {"weights": WEIGHTS}, format="json")
    assert response.status_code == 403
    assert Operation.objects.count() == ops
    assert Namespace.objects.get(name="support").weights != WEIGHTS


def test_webhook_endpoints_receive_it_only_when_they_name_it(admin_api, namespace, settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    every, _ = services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:9/a")
    named, _ = services.endpoint_create(
        created_by="admin-1",
        url="http://127.0.0.1:9/b",
        event_types=[events.NAMESPACE_PROFILE_CHANGED],
    )
    response = admin_api.patch("/api/v1/namespaces/support", {"weights": WEIGHTS}, format="json")
    assert response.status_code == 200
    dispatch.pump()
    types = {
        endpoint.pk: list(
            WebhookDelivery.objects.filter(endpoint=endpoint).values_list("event_type", flat=True)
        )
        for endpoint in (every, named)
    }
    assert types[every.pk] == []
    assert types[named.pk] == [events.NAMESPACE_PROFILE_CHANGED]
