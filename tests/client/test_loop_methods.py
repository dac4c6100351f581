"""The closed-loop calls (API.md "The closed loop"): the change feed and webhooks, with both
clients against the live server.
"""

from __future__ import annotations

import uuid

import pytest
from rms_client import RMSError

from tests.client.conftest import alist, aw, run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _loopback_receivers(settings):
    """The test receivers listen on loopback, which endpoints may not use by default (SSRF)."""
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True


async def raises(call, status):
    try:
        await aw(call())
    except RMSError as err:
        assert err.status == status, err
        return err
    raise AssertionError(f"expected RMSError {status}")


def test_the_change_feed_resumes_from_a_cursor(env, flavour):
    async def scenario(c):
        objs = await aw(
            c.create_objects(
                [{"namespace": "support", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
                 for i in range(3)]
            )
        )  # fmt: skip
        await aw(c.signal(objs[0]["id"], "CONFIRMED", session_id="s-1"))
        page = await aw(c.changes_page(namespace="support", limit=2))
        assert [e["type"] for e in page["results"]] == ["object.created", "object.created"]
        assert page["has_more"] is True
        events = await alist(c.changes(namespace="support", wait=0, idle=lambda cursor: False))
        assert [e["type"] for e in events] == ["object.created"] * 3 + ["object.reinforced"]
        assert [e["target_id"] for e in events[:3]] == [o["id"] for o in objs]
        assert events[3]["data"]["signal_type"] == "CONFIRMED"
        rest = await alist(
            c.changes(namespace="support", after=events[1]["cursor"], wait=0,
                      idle=lambda cursor: False)
        )  # fmt: skip
        assert [e["id"] for e in rest] == [e["id"] for e in events[2:]]
        only = await alist(
            c.changes(namespace="support", types=["object.reinforced"], wait=0,
                      idle=lambda cursor: False)
        )  # fmt: skip
        assert [e["id"] for e in only] == [events[3]["id"]]
        err = await raises(lambda: c.changes_page(namespace="support", after="garbage"), 400)
        assert err.code
        await raises(lambda: c.changes_page(namespace="billing"), 403)
        assert isinstance(await aw(c.alerts(namespace="support")), list)

    run(flavour, env.url, env.client, scenario)


def test_webhook_endpoints(env, flavour):
    async def scenario(c):
        hook = await aw(
            c.create_webhook("http://127.0.0.1:9/hook", namespaces=["support"],
                             event_types=["object.deprecated"], description="store")
        )  # fmt: skip
        assert hook["secret"].startswith("whsec_")
        listed = await aw(c.list_webhooks())
        assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]
        got = await aw(c.get_webhook(hook["id"]))
        assert got["state"] == "active" and "secret" not in got
        assert (await aw(c.update_webhook(hook["id"], state="disabled")))["state"] == "disabled"
        await aw(c.update_webhook(hook["id"], state="active"))
        rotated = await aw(c.rotate_webhook_secret(hook["id"]))
        assert rotated["secret"].startswith("whsec_") and rotated["secret"] != hook["secret"]
        await aw(c.test_webhook(hook["id"]))
        deliveries = await aw(c.webhook_deliveries(hook["id"]))
        assert all(d["event_type"] == "webhook.test" for d in deliveries)
        if deliveries:
            await aw(c.retry_webhook_delivery(hook["id"], deliveries[0]["id"]))
        await raises(lambda: c.get_webhook(str(uuid.uuid4())), 404)
        err = await raises(lambda: c.create_webhook("not a url"), 400)
        assert err.fields
        assert await aw(c.delete_webhook(hook["id"])) is None
        await raises(lambda: c.get_webhook(hook["id"]), 404)

    run(flavour, env.url, env.admin, scenario)

    async def not_admin(c):
        await raises(lambda: c.list_webhooks(), 403)

    run(flavour, env.url, env.client, not_admin)
