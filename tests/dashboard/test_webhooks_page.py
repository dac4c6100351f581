"""The Webhooks page (admin) and the closed loop on the overview and object pages: endpoints
with their health, the secret shown once, test / retry / disable / re-enable / delete, the
delivery log's filters; alert history; an object's change events with their deliveries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from delivery.models import WebhookDelivery, WebhookEndpoint
from feedback import alerts
from rms.models import Namespace
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _loopback(settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True


def create(c, **extra):
    body = {"action": "create", "url": "http://127.0.0.1:9/hook", "description": "store", **extra}
    return c.post("/webhooks/action/", body)


def test_only_admins_see_and_change_webhooks(admin, operator, client_user):
    assert login(operator).get("/webhooks/").status_code == 403
    assert login(client_user).get("/webhooks/").status_code == 403
    assert create(login(operator)).status_code == 403
    assert not WebhookEndpoint.objects.exists()
    page = login(admin).get("/webhooks/")
    assert page.status_code == 200
    assert "No webhook endpoints yet" in page.content.decode()
    assert 'href="/webhooks/"' in login(admin).get("/").content.decode()
    assert 'href="/webhooks/"' not in login(operator).get("/").content.decode()


def test_the_secret_is_shown_once(admin):
    c = login(admin)
    response = create(c, namespaces=["support"], event_types=["object.deprecated"])
    assert response.status_code == 200
    endpoint = WebhookEndpoint.objects.get()
    html = response.content.decode()
    assert endpoint.secret in html
    assert "shown only now" in html
    assert (endpoint.namespaces, endpoint.event_types) == (["support"], ["object.deprecated"])
    again = c.get("/webhooks/").content.decode()
    assert endpoint.secret not in again
    assert "http://127.0.0.1:9/hook" in again
    rotated = c.post("/webhooks/action/", {"action": "rotate", "endpoint": endpoint.pk})
    endpoint.refresh_from_db()
    assert endpoint.secret in rotated.content.decode()


def test_a_refused_url_is_an_error_message_and_nothing_is_written(admin, settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = False
    c = login(admin)
    response = create(c)
    assert response.status_code == 302
    assert not WebhookEndpoint.objects.exists()
    page = c.get("/webhooks/").content.decode()
    assert "loopback, private or link-local" in page


def test_test_disable_enable_retry_and_delete(admin):
    c = login(admin)
    create(c)
    endpoint = WebhookEndpoint.objects.get()
    c.post("/webhooks/action/", {"action": "test", "endpoint": endpoint.pk})
    delivery = WebhookDelivery.objects.get()
    assert delivery.event_type == "webhook.test"
    page = c.get(f"/webhooks/?endpoint={endpoint.pk}&state=pending").content.decode()
    assert f'data-delivery-id="{delivery.pk}"' in page
    assert "Retry now" in page
    done = c.get("/webhooks/?state=succeeded").content.decode()
    assert f'data-delivery-id="{delivery.pk}"' not in done

    c.post("/webhooks/action/", {"action": "disable", "endpoint": endpoint.pk})
    endpoint.refresh_from_db()
    delivery.refresh_from_db()
    assert endpoint.state == "disabled" and delivery.state == "failed"
    assert "Re-enable" in c.get("/webhooks/").content.decode()
    c.post("/webhooks/action/", {"action": "enable", "endpoint": endpoint.pk})
    endpoint.refresh_from_db()
    assert endpoint.state == "active"
    c.post(
        "/webhooks/action/", {"action": "retry", "endpoint": endpoint.pk, "delivery": delivery.pk}
    )
    delivery.refresh_from_db()
    assert delivery.state == "pending"
    c.post("/webhooks/action/", {"action": "delete", "endpoint": endpoint.pk})
    assert not WebhookEndpoint.objects.exists()


def test_overview_shows_the_alert_history(operator):
    ns = Namespace.objects.get(name="support")
    t = datetime(2026, 6, 1, 12, tzinfo=UTC)
    window = {"since": None, "until": None}
    evaluated = {"high_correction_rate": {"state": "alert", "value": 0.25, "threshold": 0.1}}
    alerts.alerts_apply(namespace_id=ns.pk, evaluated=evaluated, window=window, at=t)
    html = login(operator).get("/?namespace=support").content.decode()
    assert "Alert history" in html
    assert "0.250" in html
    assert "Open" in html


def test_object_page_lists_its_change_events(admin, history):
    obj = history.objects[0]
    html = login(admin).get(f"/objects/{obj.pk}/").content.decode()
    assert "Change events" in html
    assert "object.created" in html
    assert "object.reinforced" in html
