"""Webhooks (API.md "The closed loop"): registration and access, Standard Webhooks signatures,
retries with the same ``webhook-id``, outages, disabling, and isolation of slow endpoints —
against real local HTTP receivers."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rms_client import verify_webhook
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from delivery import dispatch
from delivery.models import WebhookDelivery, WebhookEndpoint
from feedback import alerts
from tests.delivery.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)


def register(api, url, **body):
    r = api.post("/api/v1/webhooks", {"url": url, **body}, format="json")
    assert r.status_code == 201, r.content
    return r.json()


def create_object(api, **fields):
    body = {"namespace": "support", "content": "Alice prefers Python",
            "epistemic_type": "ASSERTED", **fields}  # fmt: skip
    r = api.post("/api/v1/objects", body, format="json")
    assert r.status_code == 201, r.content
    return r.json()["id"]


def post(api, path, body):
    r = api.post(path, body, format="json")
    assert r.status_code in (200, 201), r.content
    return r.json()


def test_every_event_type_arrives_signed_and_verifies(
    fast_retries, receiver, admin_api, client_api, operator_api
):
    hook = receiver()
    endpoint = register(admin_api, hook.url, description="store")
    secret = endpoint.pop("secret")
    assert secret.startswith("whsec_")

    a = create_object(client_api)
    b = create_object(client_api, epistemic_type="CONDITIONAL", condition_state="UNKNOWN")
    post(
        client_api, f"/api/v1/objects/{a}/signals", {"signal_type": "CONFIRMED", "session_id": "s"}
    )
    post(
        client_api, f"/api/v1/objects/{a}/signals", {"signal_type": "CORRECTED", "session_id": "s"}
    )
    post(admin_api, f"/api/v1/objects/{a}/pin", {"reason": "core"})
    post(admin_api, f"/api/v1/objects/{a}/unpin", {"reason": "no"})
    post(admin_api, f"/api/v1/objects/{a}/transition", {"to": "OBSERVED", "reason": "seen"})
    post(client_api, f"/api/v1/objects/{b}/condition", {"condition_state": "TRUE"})
    post(admin_api, f"/api/v1/objects/{b}/transition", {"to": "DEPRECATED", "reason": "wrong"})
    edge = post(
        client_api,
        "/api/v1/relationships",
        {"source": a, "target": b, "relation": "supports", "extraction_context": "EXPLICIT"},
    )
    post(
        client_api,
        f"/api/v1/relationships/{edge['id']}/evidence",
        {"kind": "corroborate", "provenance": "user"},
    )
    from rms.models import Namespace

    ns = Namespace.objects.get(name="support")
    window = {"since": None, "until": None}
    alert = {"state": "alert", "value": 0.5, "threshold": 0.1}
    ok = {"state": "ok", "value": 0.05, "threshold": 0.1}
    now = timezone.now()
    alerts.alerts_apply(
        namespace_id=ns.pk, evaluated={"high_correction_rate": alert}, window=window, at=now
    )
    alerts.alerts_apply(
        namespace_id=ns.pk, evaluated={"high_correction_rate": ok}, window=window, at=now
    )
    r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/test")
    assert r.status_code == 202, r.content

    expected = [
        "object.created", "object.created", "object.reinforced", "object.penalized",
        "object.pinned", "object.unpinned", "object.transitioned",
        "object.condition_changed", "object.deprecated", "relationship.created",
        "relationship.evidence", "alert.raised", "alert.resolved", "webhook.test",
    ]  # fmt: skip
    drive(lambda: len(hook.received) >= len(expected))
    bodies = [json.loads(r.body) for r in hook.received]
    assert sorted(b["type"] for b in bodies) == sorted(expected)
    feed_events = {e["id"]: e for e in operator_api.get("/api/v1/changes").json()["results"]}
    verifier = Webhook(secret)
    for got in hook.received:
        event = verifier.verify(got.body, got.headers)  # raises if the signature is wrong
        assert verify_webhook(secret, got.body, got.headers) == event  # our client agrees
        assert got.headers["webhook-id"] == event["id"]
        assert got.headers["content-type"] == "application/json"
        assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 60
        if event["type"] != "webhook.test":
            assert event == feed_events[event["id"]]  # one shape in the feed and the webhook
    test_event = next(b for b in bodies if b["type"] == "webhook.test")
    assert {k: test_event[k] for k in ("cursor", "namespace", "target_type", "target_id",
            "op_type", "data")} == {"cursor": None, "namespace": None, "target_type": None,
            "target_id": None, "op_type": None, "data": {}}  # fmt: skip
    raised = next(b for b in bodies if b["type"] == "alert.raised")
    assert raised["target_type"] == "namespace"
    assert raised["target_id"] == str(ns.uid)
    assert raised["data"]["metric"] == "high_correction_rate"
    assert raised["data"]["value"] == 0.5
    # A wrong secret does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 32).verify(hook.received[0].body, hook.received[0].headers)
    deliveries = admin_api.get(f"/api/v1/webhooks/{endpoint['id']}/deliveries").json()
    assert len(deliveries["results"]) == len(expected)
    assert {d["state"] for d in deliveries["results"]} == {"succeeded"}
    assert all(d["attempts"] == 1 and d["response_status"] == 200 for d in deliveries["results"])
    assert all(d["latency_ms"] is not None for d in deliveries["results"])


def test_three_failures_then_success_is_four_posts_with_one_webhook_id(
    fast_retries, receiver, admin_api, client_api
):
    hook = receiver(statuses=[500, 500, 500])
    endpoint = register(admin_api, hook.url)
    create_object(client_api)
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").exists())
    assert len(hook.received) == 4
    assert len(set(hook.ids())) == 1
    assert len({r.body for r in hook.received}) == 1  # the same body on every retry
    delivery = WebhookDelivery.objects.get()
    assert (delivery.attempts, delivery.response_status, delivery.last_error) == (4, 200, "")
    ep = admin_api.get(f"/api/v1/webhooks/{endpoint['id']}").json()
    assert ep["consecutive_failures"] == 0
    assert ep["state"] == "active"
    assert ep["success_rate_24h"] == 1.0  # the delivery's last attempt succeeded


def test_a_receiver_that_was_down_gets_everything_once_it_returns(
    fast_retries, receiver, admin_api, client_api
):
    hook = receiver()
    register(admin_api, hook.url)
    hook.stop()
    ids = [create_object(client_api, content=f"fact {i}") for i in range(5)]
    for _ in range(4):
        dispatch.run_pass(budget=2)
        time.sleep(0.1)
    assert hook.received == []
    failed = WebhookDelivery.objects.filter(attempts__gt=0)
    assert failed.exists()
    assert all("ConnectError" in d.last_error for d in failed)
    hook.start()  # the same port again
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").count() == 5)
    got = [json.loads(r.body)["target_id"] for r in hook.received]
    assert sorted(got) == sorted(ids)  # each once


def test_an_endpoint_that_keeps_failing_is_disabled_and_can_be_re_enabled(
    fast_retries, receiver, admin_api, client_api
):
    fast_retries.RMS_WEBHOOK_DISABLE_AFTER = timedelta(seconds=1)
    hook = receiver(statuses=[503] * 1000)
    endpoint = register(admin_api, hook.url)
    create_object(client_api)
    drive(lambda: WebhookEndpoint.objects.get().state == "disabled")
    ep = admin_api.get(f"/api/v1/webhooks/{endpoint['id']}").json()
    assert ep["state"] == "disabled"
    assert ep["disabled_reason"].startswith("No successful delivery for")
    assert WebhookDelivery.objects.get().state == "failed"
    posts = len(hook.received)
    assert posts >= 2
    # Disabled: new events are not delivered.
    create_object(client_api, content="while disabled")
    dispatch.run_pass(budget=1)
    assert len(hook.received) == posts
    # Re-enabled: resumes at the head of the log, failure count cleared.
    hook.statuses.clear()
    r = admin_api.patch(f"/api/v1/webhooks/{endpoint['id']}", {"state": "active"}, format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["state"], r.json()["consecutive_failures"]) == ("active", 0)
    fresh = create_object(client_api, content="after")
    drive(lambda: any(json.loads(x.body)["target_id"] == fresh for x in hook.received))
    delivered = {json.loads(x.body).get("data", {}).get("version") for x in hook.received}
    assert delivered  # and the event committed while disabled was not sent:
    assert not any(b"while disabled" in x.body for x in hook.received)
    # The failed one can be retried by hand.
    failed = WebhookDelivery.objects.filter(state="failed").get()
    r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/deliveries/{failed.pk}/retry")
    assert r.status_code == 202, r.content
    drive(lambda: WebhookDelivery.objects.get(pk=failed.pk).state == "succeeded")
    r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/deliveries/{failed.pk}/retry")
    assert r.status_code == 409


def test_a_slow_endpoint_does_not_delay_another(fast_retries, receiver, admin_api, client_api):
    slow = receiver(delay=3.0)
    fast = receiver()
    register(admin_api, slow.url)
    register(admin_api, fast.url)
    create_object(client_api)
    started = time.monotonic()
    dispatch.run_pass(budget=0.5)
    assert time.monotonic() - started < 2.5  # the pass did not wait for the slow one
    assert len(fast.received) == 1
    assert fast.received[0].at - started < 1.5
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").count() == 2, wait=0.5)
    assert len(slow.received) == 1


def test_filters_by_namespace_and_type(fast_retries, receiver, admin_api, client_api, outsider_api):
    hook = receiver()
    register(admin_api, hook.url, namespaces=["billing"], event_types=["object.created"])
    create_object(client_api)
    theirs = create_object(outsider_api, namespace="billing")
    post(outsider_api, f"/api/v1/objects/{theirs}/signals",
         {"signal_type": "CONFIRMED", "session_id": "s"})  # fmt: skip
    for _ in range(3):
        dispatch.run_pass(budget=1)
    assert [json.loads(r.body)["target_id"] for r in hook.received] == [theirs]


def test_rotation_signs_with_the_new_secret_only(fast_retries, receiver, admin_api, client_api):
    hook = receiver()
    endpoint = register(admin_api, hook.url)
    old = endpoint["secret"]
    r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/rotate-secret")
    assert r.status_code == 200
    new = r.json()["secret"]
    assert new != old
    create_object(client_api)
    drive(lambda: len(hook.received) == 1)
    got = hook.received[0]
    Webhook(new).verify(got.body, got.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(got.body, got.headers)


def test_secrets_appear_nowhere_after_creation(
    fast_retries, receiver, admin_api, client_api, caplog, client
):
    hook = receiver(statuses=[500])
    endpoint = register(admin_api, hook.url)
    secret = endpoint["secret"]
    caplog.set_level(logging.DEBUG)
    create_object(client_api)
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").exists())
    listed = admin_api.get("/api/v1/webhooks").content.decode()
    detail = admin_api.get(f"/api/v1/webhooks/{endpoint['id']}").content.decode()
    deliveries = admin_api.get(f"/api/v1/webhooks/{endpoint['id']}/deliveries").content.decode()
    raw = secret.removeprefix("whsec_")
    for text in (listed, detail, deliveries, caplog.text):
        assert raw not in text
    assert "secret" not in json.loads(detail)
    ep = WebhookEndpoint.objects.get()
    assert raw not in str(ep) and raw not in repr(ep)
    # The Django admin shows neither the secret nor a field for it.
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(user)
    page = client.get(f"/admin/delivery/webhookendpoint/{ep.pk}/change/")
    assert page.status_code == 200
    assert raw not in page.content.decode()


def test_dispatchers_running_at_once_deliver_each_event_once(
    fast_retries, receiver, admin_api, client_api
):
    hook = receiver()
    register(admin_api, hook.url)
    for i in range(12):
        create_object(client_api, content=f"fact {i}")
    errors: list[BaseException] = []

    def passes():
        try:
            for _ in range(6):
                dispatch.run_pass(budget=2)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=passes) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").count() == 12)
    assert len(hook.ids()) == 12 == len(set(hook.ids()))
    assert WebhookDelivery.objects.count() == 12


# --- registration and access ----------------------------------------------------------------


def test_only_admins_touch_webhooks(fast_retries, admin_api, operator_api, client_api, anon_api):
    endpoint = register(admin_api, "http://127.0.0.1:9/hook")
    paths = [
        ("get", "/api/v1/webhooks"),
        ("post", "/api/v1/webhooks"),
        ("get", f"/api/v1/webhooks/{endpoint['id']}"),
        ("patch", f"/api/v1/webhooks/{endpoint['id']}"),
        ("delete", f"/api/v1/webhooks/{endpoint['id']}"),
        ("post", f"/api/v1/webhooks/{endpoint['id']}/rotate-secret"),
        ("post", f"/api/v1/webhooks/{endpoint['id']}/test"),
        ("get", f"/api/v1/webhooks/{endpoint['id']}/deliveries"),
    ]
    for method, path in paths:
        for api, status in ((operator_api, 403), (client_api, 403), (anon_api, 401)):
            r = getattr(api, method)(path, {}, format="json")
            assert r.status_code == status, (method, path, r.content)
            assert "error" in r.json()
    assert admin_api.get("/api/v1/webhooks/not-a-uuid").status_code == 404
    missing = "/api/v1/webhooks/00000000-0000-4000-8000-000000000000"
    assert admin_api.get(missing).status_code == 404
    r = admin_api.post(f"/api/v1/webhooks/{endpoint['id']}/deliveries/nope/retry")
    assert r.status_code == 404
    assert admin_api.delete(f"/api/v1/webhooks/{endpoint['id']}").status_code == 204
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "http:///nohost"}, "url"),
        ({"url": "http://user:pw@127.0.0.1/x"}, "url"),
        ({"url": 42}, "url"),
        ({}, "url"),
        ({"url": "http://127.0.0.1:9/x", "namespaces": ["nope"]}, "namespaces"),
        ({"url": "http://127.0.0.1:9/x", "namespaces": "support"}, "namespaces"),
        ({"url": "http://127.0.0.1:9/x", "event_types": ["object.exploded"]}, "event_types"),
        ({"url": "http://127.0.0.1:9/x", "colour": "red"}, "colour"),
    ],
)
def test_bad_registrations_are_400(fast_retries, admin_api, body, field):
    r = admin_api.post("/api/v1/webhooks", body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["error"]["fields"]
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
    ],
)
def test_private_addresses_are_refused_by_default(settings, admin_api, url):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = False
    r = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert r.status_code == 400, r.content
    assert "private" in r.json()["error"]["fields"]["url"][0]


def test_an_endpoint_that_turns_private_is_not_called(settings, receiver, admin_api, client_api):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    hook = receiver()
    register(admin_api, hook.url)
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = False  # as if its name now resolved inside
    create_object(client_api)
    dispatch.run_pass(budget=1)
    assert hook.received == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error.startswith("refused:")
    assert delivery.state == "pending"


def test_new_endpoints_receive_only_events_after_their_creation(
    fast_retries, receiver, admin_api, client_api
):
    create_object(client_api, content="before")
    hook = receiver()
    register(admin_api, hook.url)
    after = create_object(client_api, content="after")
    drive(lambda: len(hook.received) == 1)
    for _ in range(2):
        dispatch.run_pass(budget=1)
    assert [json.loads(r.body)["target_id"] for r in hook.received] == [after]


def test_delivery_log_filters_and_pages(fast_retries, receiver, admin_api, client_api):
    hook = receiver()
    endpoint = register(admin_api, hook.url)
    for i in range(3):
        create_object(client_api, content=f"f{i}")
    drive(lambda: len(hook.received) == 3)
    base = f"/api/v1/webhooks/{endpoint['id']}/deliveries"
    page = admin_api.get(base, {"page_size": 2}).json()
    assert len(page["results"]) == 2 and page["next"]
    rest = admin_api.get(page["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None
    assert admin_api.get(base, {"state": "failed"}).json()["results"] == []
    assert len(admin_api.get(base, {"event_type": "object.created"}).json()["results"]) == 3
    assert admin_api.get(base, {"state": "lost"}).status_code == 400
    assert admin_api.get(base, {"event_type": "nope"}).status_code == 400


def test_prometheus_counts_attempts_and_pending(fast_retries, receiver, admin_api, client_api):
    from prometheus_client.parser import text_string_to_metric_families

    def samples():
        text = admin_api.get("/metrics").content.decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    before = samples()
    hook = receiver(statuses=[500])
    register(admin_api, hook.url)
    create_object(client_api)
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").exists())
    after = samples()

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("rms_webhook_attempts_total", outcome="succeeded") == 1
    assert moved("rms_webhook_attempts_total", outcome="http_error") == 1
    assert moved("rms_webhook_latency_seconds_count") == 2
    assert after[("rms_webhook_endpoints", (("state", "active"),))] == 1
    assert after[("rms_webhook_pending_deliveries", ())] == 0


def test_a_dead_endpoint_costs_one_attempt_per_lane_and_its_queued_claims_are_released(
    settings, receiver, admin_api, client_api
):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    settings.RMS_WEBHOOK_PER_ENDPOINT = 2  # two lanes; the default 5 s backoff holds the rest
    hook = receiver(statuses=[503] * 100)
    register(admin_api, hook.url)
    for i in range(10):
        create_object(client_api, content=f"fact {i}")
    dispatch.run_pass(budget=0.5)
    assert len(hook.received) == 2  # each lane stopped at its endpoint's first failure
    pending = WebhookDelivery.objects.filter(state="pending")
    assert pending.count() == 10
    assert not pending.filter(lease_until__isnull=False).exists()  # none left claimed
    assert sorted(pending.values_list("attempts", flat=True)) == [0] * 8 + [1, 1]


def test_an_endpoint_gets_at_most_its_lanes_at_once_back_to_back(
    fast_retries, receiver, admin_api, client_api
):
    fast_retries.RMS_WEBHOOK_PER_ENDPOINT = 3
    hook = receiver(delay=0.1)
    register(admin_api, hook.url)
    for i in range(24):
        create_object(client_api, content=f"fact {i}")
    drive(lambda: WebhookDelivery.objects.filter(state="succeeded").count() == 24, wait=2)
    arrivals = sorted(r.at for r in hook.received)
    # A lane sends its next claim only after its previous answer (0.1 s later), so the requests
    # that arrived within 0.09 s of one another were each on a different lane.
    at_once = max(sum(1 for b in arrivals if a - 0.09 < b <= a) for a in arrivals)
    assert at_once == 3
    assert len(arrivals) == 24


def test_a_pass_that_ends_releases_the_claims_it_did_not_start(
    settings, receiver, admin_api, client_api
):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    settings.RMS_WEBHOOK_PER_ENDPOINT = 1
    hook = receiver(delay=0.4)
    register(admin_api, hook.url)
    for i in range(6):
        create_object(client_api, content=f"fact {i}")
    dispatch.run_pass(budget=0.2)
    time.sleep(0.6)  # the attempt under way ends and stores itself
    assert len(hook.received) == 1
    assert WebhookDelivery.objects.filter(state="succeeded").count() == 1
    pending = WebhookDelivery.objects.filter(state="pending")
    assert pending.count() == 5
    assert not pending.filter(lease_until__isnull=False).exists()  # due again for any pass
