"""After an erasure none of the erased strings is served anywhere: the CSV exports, the change
feed, the webhook delivery log, the dashboard pages of the erased objects and the sessions."""

from __future__ import annotations

import json

import pytest
from django.test import Client, override_settings

from delivery import dispatch, services
from delivery.models import WebhookDelivery
from tests.erasure.conftest import (
    ALICE,
    CONTENT,
    CONTEXT,
    CONTEXT_TAG,
    EVIDENCE,
    OTHER_CONTENT,
    SESSION_ID,
    SIGNAL_EVIDENCE,
    TAG,
    build_personal_log,
    chain_result,
    erase,
)

# the change feed shows committed transactions only (PostgreSQL: by transaction id)
pytestmark = pytest.mark.django_db(transaction=True)

EVERYTHING = [CONTENT, OTHER_CONTENT, TAG, EVIDENCE, ALICE, CONTEXT, CONTEXT_TAG, SIGNAL_EVIDENCE]


def served(admin_api, client_api, oids) -> str:
    """Everything the API, the feed, the delivery log and the dashboard serve about the log."""
    parts = []
    for kind in ("sessions", "aggregates"):
        response = client_api.get(f"/api/v1/export/{kind}.csv", {"namespace": "support"})
        assert response.status_code == 200
        parts.append(b"".join(response.streaming_content).decode())
    parts.append(json.dumps(admin_api.get("/api/v1/changes", {"limit": 1000}).json()))
    parts.append(json.dumps(list(WebhookDelivery.objects.values_list("event", flat=True))))
    page = Client()
    page.force_login(admin_api.row.user)
    for oid in oids:
        parts.append(json.dumps(client_api.get(f"/api/v1/objects/{oid}").json()))
        parts.append(json.dumps(client_api.get(f"/api/v1/objects/{oid}/operations").json()))
        response = page.get(f"/objects/{oid}/")
        assert response.status_code == 200
        parts.append(response.content.decode())
    sessions = client_api.get("/api/v1/feedback-sessions", {"namespace": "support"})
    if sessions.status_code == 200:
        parts.append(json.dumps(sessions.json()))
    return "\n".join(parts)


#: What each kind removes from every surface (the namespace kind: everything).
ERASED = {
    "object": [CONTENT, TAG, EVIDENCE],
    "actor": [ALICE],
    "session": [CONTEXT, CONTEXT_TAG],
    "namespace": EVERYTHING,
}


@override_settings(RMS_WEBHOOKS_ALLOW_PRIVATE=True)
@pytest.mark.parametrize("kind", ["object", "actor", "session", "namespace"])
def test_an_erasure_leaves_no_string_in_any_served_surface(kind, admin_api, client_api):
    services.endpoint_create(created_by="admin-1", url="http://127.0.0.1:9/hook")
    log = build_personal_log(client_api)
    dispatch.pump()
    before = served(admin_api, client_api, log.values())
    assert CONTENT in before and OTHER_CONTENT in before  # the surfaces do show them
    subject = {"object": log["object"], "actor": ALICE, "session": SESSION_ID}.get(kind)
    receipt = erase(admin_api, kind, subject)
    dispatch.pump()
    after = served(admin_api, client_api, log.values())
    assert [s for s in ERASED[kind] if s in after] == []
    # the endpoint (all types) received one object.erased per erased object, naming the erasure
    erased = WebhookDelivery.objects.filter(event_type="object.erased")
    expected = {"object": [log["object"]], "session": [], "namespace": sorted(log.values())}
    if kind != "actor":
        assert sorted(d.event["target_id"] for d in erased) == sorted(expected[kind])
    assert {d.event["data"]["erasure_id"] for d in erased} <= {receipt["id"]}
    assert chain_result()["ok"] is True
