"""The objects browser (filters, sort, pages, bulk pin/deprecate), the alerts page and the
suppressed-memories page: real rows, real services, both databases."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from dashboard.tasks import compute_suppressed
from feedback.models import Alert, FeedbackAggregate
from rms.models import MemoryObject, Namespace, Operation
from tests.dashboard.conftest import login
from tests.factories import make_client, make_object

pytestmark = pytest.mark.django_db


def messages_of(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def row_ids(response) -> list[str]:
    """Object ids of the table's rows, in order (each row links its content by id)."""
    return re.findall(r'<a id="c-([0-9a-f-]{36})"', response.content.decode())


@pytest.fixture
def objs(namespaces):
    writer = make_client("writer", "client", ["support"])[0]
    made = {}
    for name, conf, agg in (
        ("alpha refund", 0.70, (30, 0.05)),
        ("beta Refund", 0.90, (30, 0.50)),
        ("gamma shipping", 0.40, (10, 0.0)),
        ("delta pricing", 0.20, None),
    ):
        obj = make_object(writer, content=name, confidence=conf)
        if agg:
            FeedbackAggregate.objects.create(
                object=obj, namespace=obj.namespace, total_injections=agg[0], usage_ratio=agg[1]
            )
        made[name.split()[0]] = str(obj.pk)
    billing = make_client("bw", "client", ["billing"])[0]
    made["billing"] = str(make_object(billing, namespace="billing", content="refund bill").pk)
    return made


def test_browser_filters_sorts_and_pages(operator, objs):
    c = login(operator)
    r = c.get("/objects/?namespace=support&sort=confidence&dir=desc")
    assert r.status_code == 200
    assert row_ids(r) == [objs["beta"], objs["alpha"], objs["gamma"], objs["delta"]]
    r = c.get("/objects/?q=refund&sort=confidence&dir=asc")
    assert row_ids(r) == [objs["alpha"], objs["billing"], objs["beta"]]
    r = c.get("/objects/?namespace=support&usage_ratio_max=0.1&confidence_min=0.5")
    assert row_ids(r) == [objs["alpha"]]
    assert row_ids(c.get("/objects/?in_alert=true")) == [objs["alpha"]]
    assert row_ids(c.get("/objects/?pinned=true")) == []
    r = c.get("/objects/?namespace=support&sort=injections&dir=desc&per_page=25&page=1")
    assert row_ids(r)[-1] == objs["delta"]  # never injected sorts last when descending
    assert "1–4 of 4" in r.content.decode()


def test_browser_pages_of_25(operator, namespaces):
    writer = make_client("w2", "client", ["support"])[0]
    for i in range(30):
        make_object(writer, content=f"item {i:02d}", confidence=round(0.01 * (i + 1), 2))
    c = login(operator)
    first = c.get("/objects/?sort=confidence&dir=asc&per_page=25")
    second = c.get("/objects/?sort=confidence&dir=asc&per_page=25&page=2")
    assert len(row_ids(first)) == 25 and len(row_ids(second)) == 5
    confs = list(
        MemoryObject.objects.filter(pk__in=row_ids(second)).values_list("confidence", flat=True)
    )
    assert sorted(confs) == [0.26, 0.27, 0.28, 0.29, 0.30]
    assert "26–30 of 30" in second.content.decode()


def test_browser_explains_bad_filters_and_empty_results(operator, objs):
    c = login(operator)
    body = c.get("/objects/?confidence_min=7").content.decode()
    assert "confidence_min: Must be a number in [0, 1]. This filter was left out." in body
    assert len(row_ids(c.get("/objects/?confidence_min=7"))) == 5
    body = c.get("/objects/?q=nothing-like-this").content.decode()
    assert "No object matches these filters" in body


def test_browser_is_scoped_by_namespace(client_user, objs):
    c = login(client_user)
    assert objs["billing"] not in row_ids(c.get("/objects/?q=refund"))
    assert c.get("/objects/?namespace=billing").status_code == 404


def test_bulk_pin_and_deprecate_write_one_operation_each(admin, objs):
    c = login(admin)
    page = c.get("/objects/?namespace=support").content.decode()
    assert "Pin selected" in page and "Deprecate selected" in page
    ids = [objs["alpha"], objs["gamma"]]
    r = c.post(
        "/objects/bulk/",
        {"ids": ids, "reason": "checked by billing", "action": "pin", "next": "/objects/?q=a"},
    )
    assert r.status_code == 302 and r["Location"] == "/objects/?q=a"
    pins = Operation.objects.filter(op_type="PIN").order_by("seq")
    assert [str(op.target_id) for op in pins] == ids
    assert all(op.payload["reason"] == "checked by billing" for op in pins)
    assert all((op.actor_id, op.actor_type) == ("ada-admin", "HUMAN_USER") for op in pins)
    assert set(MemoryObject.objects.filter(pk__in=ids).values_list("pinned", flat=True)) == {True}
    assert any(m.startswith("Pinned 2 objects:") for m in messages_of(r))

    c.post(f"/objects/{objs['beta']}/deprecate/", {"reason": "first"})
    r = c.post(
        "/objects/bulk/",
        {"ids": [objs["beta"], objs["delta"]], "reason": "stale", "action": "deprecate"},
    )
    msgs = messages_of(r)
    assert any(m.startswith("Deprecated 1 object:") for m in msgs)
    assert any(m.startswith("Not deprecated") and objs["beta"][:8] in m for m in msgs)
    assert MemoryObject.objects.get(pk=objs["delta"]).epistemic_type == "DEPRECATED"
    assert Operation.objects.filter(op_type="EPISTEMIC_TRANSITION").count() == 2


def test_bulk_actions_are_for_admins_only(operator, client_user, objs):
    for user in (operator, client_user):
        c = login(user)
        assert "Pin selected" not in c.get("/objects/").content.decode()
        r = c.post("/objects/bulk/", {"ids": [objs["alpha"]], "reason": "x", "action": "pin"})
        assert r.status_code == 403
    assert not Operation.objects.filter(op_type="PIN").exists()


def test_bulk_action_needs_csrf(admin, objs):
    c = Client(enforce_csrf_checks=True)
    c.force_login(admin)
    r = c.post("/objects/bulk/", {"ids": [objs["alpha"]], "reason": "x", "action": "pin"})
    assert r.status_code == 403
    assert not Operation.objects.filter(op_type="PIN").exists()


def test_bulk_action_refuses_an_object_of_an_unknown_action(admin, objs):
    r = login(admin).post(
        "/objects/bulk/", {"ids": [objs["alpha"]], "reason": "x", "action": "explode"}
    )
    assert r.status_code == 302
    assert not Operation.objects.filter(op_type__in=["PIN", "EPISTEMIC_TRANSITION"]).exists()


@pytest.fixture
def alert_rows(namespaces):
    support, billing = namespaces
    now = timezone.now().replace(microsecond=0)
    long_open = Alert.objects.create(
        namespace=support,
        metric="mean_usage_ratio",
        raised_at=now - timedelta(days=3),
        value=0.041,
        threshold=0.1,
    )
    short_done = Alert.objects.create(
        namespace=support,
        metric="high_correction_rate",
        state=Alert.RESOLVED,
        raised_at=now - timedelta(days=2),
        resolved_at=now - timedelta(days=2) + timedelta(hours=5),
        value=0.25,
        threshold=0.1,
        resolved_value=0.05,
    )
    other = Alert.objects.create(
        namespace=billing,
        metric="budget_waste_ratio",
        raised_at=now - timedelta(hours=1),
        value=0.9,
        threshold=0.5,
    )
    return {"long_open": long_open, "short_done": short_done, "billing": other}


def alert_order(response, rows) -> list[str]:
    body = response.content.decode()
    found = {name: body.find(f">{a.value:.3f}<") for name, a in rows.items()}
    return [n for n, pos in sorted(found.items(), key=lambda kv: kv[1]) if pos >= 0]


def test_alerts_page_lists_filters_and_sorts(operator, alert_rows):
    c = login(operator)
    r = c.get("/alerts/")
    assert r.status_code == 200
    assert alert_order(r, alert_rows) == ["billing", "short_done", "long_open"]
    body = r.content.decode()
    assert "so far" in body and "3\xa0days" in body and "5\xa0hours" in body
    assert ">0.050<" in body  # the value at resolve
    r = c.get("/alerts/?sort=duration&dir=desc")
    assert alert_order(r, alert_rows) == ["long_open", "short_done", "billing"]
    assert alert_order(c.get("/alerts/?state=open&namespace=support"), alert_rows) == ["long_open"]
    r = c.get("/alerts/?metric=high_correction_rate")
    assert alert_order(r, alert_rows) == ["short_done"]
    assert (
        "No alert matches these filters"
        in c.get("/alerts/?metric=unused_injection_rate").content.decode()
    )


def test_alerts_page_is_scoped(client_user, alert_rows):
    c = login(client_user)
    assert alert_order(c.get("/alerts/"), alert_rows) == ["short_done", "long_open"]
    assert c.get("/alerts/?namespace=billing").status_code == 404


def test_suppressed_page_lists_with_why_and_pin_for_admins(admin, client_user, namespaces):
    writer = make_client("w3", "client", ["support"])[0]
    old = timezone.now() - timedelta(days=20)
    buried = make_object(writer, content="rapid fact", epistemic_type="UNVERIFIED", ts=old)
    make_object(writer, content="steady fact", epistemic_type="ASSERTED", ts=old)
    body = login(admin).get("/suppressed/?namespace=support").content.decode()
    assert "rapid fact" in body and "steady fact" not in body
    assert "decayed" in body and f'action="/objects/{buried.pk}/pin/"' in body
    # 0.5·e^(−0.2·20) = 0.009 at the page's clock (a few ms after the object's 20 days).
    assert ">0.009 <" in body
    body = login(client_user).get("/suppressed/?namespace=support").content.decode()
    assert "rapid fact" in body and "/pin/" not in body
    body = login(admin).get("/suppressed/?namespace=support&salience_below=0.001").content
    assert "Nothing suppressed in support" in body.decode()
    Namespace.objects.filter(name="support").update(weights={"similarity": 7})
    body = login(admin).get("/suppressed/?namespace=support").content.decode()
    assert "retrieval profile is invalid" in body


def test_suppressed_page_is_scoped(outsider, namespaces):
    assert login(outsider).get("/suppressed/?namespace=support").status_code == 404


def test_suppressed_page_says_as_of_and_recomputes_on_demand(admin, namespaces):
    cache.clear()
    writer = make_client("w4", "client", ["support"])[0]
    old = timezone.now() - timedelta(days=20)
    make_object(writer, content="rapid one", epistemic_type="UNVERIFIED", ts=old)
    c = login(admin)
    body = c.get("/suppressed/?namespace=support").content.decode()
    assert "rapid one" in body and "1 suppressed" in body and "computed ahead" not in body
    make_object(writer, content="rapid two", epistemic_type="UNVERIFIED", ts=old)
    # Served from the listing computed a moment ago, and says so.
    body = c.get("/suppressed/?namespace=support").content.decode()
    assert "rapid two" not in body and "computed ahead" in body and "refresh=1" in body
    body = c.get("/suppressed/?namespace=support&refresh=1").content.decode()
    assert "rapid two" in body and "2 suppressed" in body


def test_a_large_namespace_page_waits_for_the_worker_and_never_scores(admin, namespaces, settings):
    settings.RMS_SUPPRESSED_INLINE_OBJECTS = 0  # too large to score on a request
    cache.clear()
    writer = make_client("w5", "client", ["support"])[0]
    old = timezone.now() - timedelta(days=20)
    make_object(writer, content="rapid one", epistemic_type="UNVERIFIED", ts=old)
    c = login(admin)
    body = c.get("/suppressed/?namespace=support").content.decode()
    assert 'data-testid="suppressed-pending"' in body and 'http-equiv="refresh"' in body
    assert "rapid one" not in body
    ns = Namespace.objects.get(name="support")
    compute_suppressed(str(ns.uid), 0.05, 5, None)  # the worker's task, run here
    body = c.get("/suppressed/?namespace=support").content.decode()
    assert "rapid one" in body and "computed ahead" in body and "http-equiv" not in body
    make_object(writer, content="rapid two", epistemic_type="UNVERIFIED", ts=old)
    # "Recompute now" queues the worker and shows the stored listing meanwhile.
    body = c.get("/suppressed/?namespace=support&refresh=1").content.decode()
    assert "rapid one" in body and "rapid two" not in body
    assert "being recomputed on the worker" in body
    compute_suppressed(str(ns.uid), 0.05, 5, None)
    body = c.get("/suppressed/?namespace=support").content.decode()
    assert "rapid two" in body and "2 suppressed" in body
