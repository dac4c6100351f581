"""The webhook API over HTTP, the parts test_webhooks.py does not walk through: updates and
their refusals, the contract's error shape for every refusal, and one endpoint's view."""

from __future__ import annotations

import pytest

from delivery.models import WebhookDelivery

pytestmark = pytest.mark.django_db

BASE = "/api/v1/webhooks"


@pytest.fixture
def endpoint(fast_retries, admin_api) -> dict:
    r = admin_api.post(BASE, {"url": "http://127.0.0.1:9/hook"}, format="json")
    assert r.status_code == 201, r.content
    return r.json()


def error(r, status: int) -> dict:
    assert r.status_code == status, r.content
    body = r.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    return body["error"]


def test_one_endpoint_is_shown_with_its_health_and_without_its_secret(admin_api, endpoint):
    r = admin_api.get(f"{BASE}/{endpoint['id']}")
    assert r.status_code == 200
    shown = r.json()
    assert "secret" not in shown and endpoint["secret"] not in r.content.decode()
    assert shown["id"] == endpoint["id"] and shown["state"] == "active"
    assert shown["success_rate_24h"] is None and shown["pending_deliveries"] == 0


def test_an_update_is_answered_with_the_endpoint_as_stored(admin_api, endpoint):
    r = admin_api.patch(
        f"{BASE}/{endpoint['id']}",
        {"description": "billing hooks", "namespaces": ["support"]},
        format="json",
    )
    assert r.status_code == 200
    assert r.json()["description"] == "billing hooks" and r.json()["namespaces"] == ["support"]
    assert admin_api.get(f"{BASE}/{endpoint['id']}").json()["description"] == "billing hooks"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"secret": "whsec_mine"}, "secret"),
        ({"state": "paused"}, "state"),
        ({"url": "gopher://127.0.0.1/x"}, "url"),
        ({"event_types": ["object.exploded"]}, "event_types"),
        ({"description": 7}, "description"),
    ],
)
def test_a_bad_update_is_a_400_naming_the_field_and_changes_nothing(
    admin_api, endpoint, body, field
):
    err = error(admin_api.patch(f"{BASE}/{endpoint['id']}", body, format="json"), 400)
    assert err["code"] == "validation_error" and field in err["fields"]
    assert admin_api.get(f"{BASE}/{endpoint['id']}").json() == {
        **{k: v for k, v in endpoint.items() if k != "secret"},
        "success_rate_24h": None,
        "pending_deliveries": 0,
        "last_delivery_at": None,
    }


@pytest.mark.parametrize("method", ["post", "patch"])
def test_a_body_that_is_not_an_object_is_a_400(admin_api, endpoint, method):
    path = BASE if method == "post" else f"{BASE}/{endpoint['id']}"
    err = error(getattr(admin_api, method)(path, ["url"], format="json"), 400)
    assert err["fields"] == {"non_field_errors": ["Expected a JSON object."]}


def test_a_disabled_endpoint_refuses_test_events_with_a_409(admin_api, endpoint):
    admin_api.patch(f"{BASE}/{endpoint['id']}", {"state": "disabled"}, format="json")
    err = error(admin_api.post(f"{BASE}/{endpoint['id']}/test"), 409)
    assert err["code"] == "endpoint_disabled"


def test_a_test_event_is_accepted_and_listed_and_a_delivered_one_is_not_retried(
    admin_api, endpoint
):
    r = admin_api.post(f"{BASE}/{endpoint['id']}/test")
    assert r.status_code == 202 and r.json()["state"] == "pending"
    listed = admin_api.get(f"{BASE}/{endpoint['id']}/deliveries").json()["results"]
    assert [d["id"] for d in listed] == [r.json()["id"]]
    WebhookDelivery.objects.filter(pk=r.json()["id"]).update(state=WebhookDelivery.SUCCEEDED)
    retry = admin_api.post(f"{BASE}/{endpoint['id']}/deliveries/{r.json()['id']}/retry")
    assert error(retry, 409)["code"] == "already_delivered"


def test_the_deliveries_of_an_unknown_endpoint_are_a_404(admin_api, fast_retries):
    missing = "00000000-0000-4000-8000-000000000000"
    assert error(admin_api.get(f"{BASE}/{missing}/deliveries"), 404)["code"] == "not_found"
    assert error(admin_api.post(f"{BASE}/{missing}/test"), 404)["code"] == "not_found"
