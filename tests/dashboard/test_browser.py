"""The dashboard in a real Chromium against a live server: log in, read the overview with its
charts drawn and no console error, pin and bulk-deprecate from the review queue as an admin, be
refused as an operator.

The documentation screenshots are taken by ``manage.py screenshots`` (dashboard.screenshots).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest

# pytest-django's live server and Playwright's sync API share the test thread.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from rms.models import MemoryObject, Operation  # noqa: E402
from tests.dashboard import scenario  # noqa: E402
from tests.dashboard.conftest import T0, record, session_body  # noqa: E402
from tests.factories import make_client, make_namespace, make_object  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "pw-dashboard-1"


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):  # .ci/run installs it: a missing browser there is a failure
            pytest.fail("Debian's chromium is missing at /usr/bin/chromium")
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _no_worker_messages(monkeypatch):
    """Sessions committed here would queue sweeps for a worker; nothing listens in tests."""
    monkeypatch.setattr("taskruns.enqueue.sweep_objects", lambda ids: None)


class Console:
    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.console = Console(page)
    yield page
    context.close()


def log_in(page, live_server, username: str):
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/**")


def review_data(n: int = 3):
    """``n`` objects injected 20 times and never used: the review queue of ``support``."""
    make_namespace("support")
    writer = make_client("writer", "client", ["support"])[0]
    objs = [make_object(writer, content=f"Stale fact {i}", ts=T0) for i in range(n)]
    record(
        writer,
        *[
            session_body(f"q-{k}", [(o.pk, 30) for o in objs], hours=1 + k, outcome="PARTIAL")
            for k in range(20)
        ],
    )
    return objs


def test_log_in_and_read_the_overview_with_charts(page, live_server):
    review_data()
    scenario.user("otto", "operator", password=PASSWORD)
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url  # anonymous: sent to the login first
    log_in(page, live_server, "otto")
    assert page.get_by_role("heading", name="Overview").is_visible()
    assert page.get_by_role("heading", name="All namespaces").is_visible()
    # Four metric cards, each with its state in words.
    cards = page.locator("article.metric")
    assert cards.count() == 4
    for pill in page.locator("article.metric .pill").all():
        assert re.search(r"(OK|Alert|No data)$", pill.inner_text().strip())
    # Plotly drew the histograms (served locally), and nothing logged an error.
    page.wait_for_selector("[data-chart='chart-usage'] .main-svg")
    page.wait_for_selector("[data-chart='chart-confidence'] .main-svg")
    assert page.locator(".modebar").count() == 0  # displayModeBar: false
    assert page.console.errors == []
    assert page.get_by_role("heading", name="What feedback cannot fix").is_visible()


def test_admin_pins_from_the_review_queue(page, live_server):
    objs = review_data()
    scenario.user("ada", "admin", password=PASSWORD)
    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/review/?namespace=support&sort=confidence")
    row = page.locator("tbody tr", has_text="Stale fact 1")
    row.locator("summary", has_text="Pin").click()
    reason = row.get_by_label("Reason for pinning")
    assert reason.is_visible()
    reason.fill("Checked with the customer")
    row.get_by_role("button", name="Pin object").click()
    page.wait_for_selector(".messages .success")
    assert "Pinned at confidence" in page.locator(".messages").inner_text()
    assert "sort=confidence" in page.url  # back to the same view of the queue
    pinned = MemoryObject.objects.get(pk=objs[1].pk)
    assert pinned.pinned
    op = Operation.objects.filter(target_id=pinned.pk).latest("seq")
    assert (op.op_type, op.actor_id, op.actor_type) == ("PIN", "ada", "HUMAN_USER")
    assert op.payload["reason"] == "Checked with the customer"
    assert page.console.errors == []


def test_admin_bulk_deprecates_with_one_reason(page, live_server):
    objs = review_data()
    scenario.user("ada", "admin", password=PASSWORD)
    log_in(page, live_server, "ada")
    page.goto(f"{live_server.url}/review/?namespace=support")
    submit = page.get_by_role("button", name="Deprecate selected")
    assert submit.is_disabled()  # nothing selected yet
    page.get_by_label("Select all objects on this page").check()
    assert page.locator("[data-selected-count]").inner_text() == "3 selected"
    page.get_by_label("Deprecate the selected objects with one reason").fill("Product renamed")
    submit.click()
    page.wait_for_selector(".messages .success")
    assert "Deprecated 3 objects." in page.locator(".messages").inner_text()
    assert "Nothing to review in support" in page.content()
    ops = Operation.objects.filter(op_type="EPISTEMIC_TRANSITION")
    assert {op.target_id for op in ops} == {o.pk for o in objs}
    assert {op.payload["reason"] for op in ops} == {"Product renamed"}


def test_operator_is_refused_admin_actions(page, live_server):
    objs = review_data()
    scenario.user("otto", "operator", password=PASSWORD)
    log_in(page, live_server, "otto")
    page.goto(f"{live_server.url}/review/?namespace=support")
    assert page.locator("tbody tr").count() == 3
    assert page.get_by_role("button", name="Deprecate selected").count() == 0
    assert page.locator("summary", has_text="Pin").count() == 0
    # A forged POST with a valid CSRF token is still refused on the server.
    status = page.evaluate(
        """async (url) => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const body = new URLSearchParams({reason: "forged", csrfmiddlewaretoken: token});
            const r = await fetch(url, {method: "POST", body, credentials: "same-origin"});
            return r.status;
        }""",
        f"/objects/{objs[0].pk}/pin/",
    )
    assert status == 403
    assert not MemoryObject.objects.get(pk=objs[0].pk).pinned
    page.console.errors.clear()  # the browser logs the refused request itself
    page.goto(f"{live_server.url}/objects/{objs[0].pk}/")
    assert page.get_by_role("heading", name="Admin actions").count() == 0
    page.wait_for_selector("[data-chart='chart-trajectory'] .main-svg")
    assert page.console.errors == []


def test_keyboard_users_can_skip_to_the_content(page, live_server):
    make_namespace("support")
    scenario.user("otto", "operator", password=PASSWORD)
    log_in(page, live_server, "otto")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    assert skip.evaluate("el => el === document.activeElement")
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"


def test_an_admin_adds_a_webhook_sees_its_secret_once_and_sends_a_test(page, live_server, settings):
    """The Webhooks page in Chromium: add an endpoint through the form, read the secret once,
    send a test event and find its delivery in the log."""
    from delivery.models import WebhookDelivery, WebhookEndpoint

    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    make_namespace("support")
    scenario.user("wanda", "admin", password=PASSWORD)
    log_in(page, live_server, "wanda")
    page.goto(f"{live_server.url}/webhooks/")
    page.get_by_label("URL").fill("http://127.0.0.1:9/memory-store/events")
    page.get_by_label("Description").fill("memory store sync")
    page.get_by_label("object.deprecated").check()
    page.get_by_label("object.pinned").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Add endpoint").click()
    secret = page.locator("[data-secret]").inner_text().strip()
    endpoint = WebhookEndpoint.objects.get()
    assert secret == endpoint.secret
    assert endpoint.event_types == ["object.deprecated", "object.pinned"]
    with page.expect_navigation():
        page.get_by_role("button", name="Send test").click()
    assert page.locator("[data-secret]").count() == 0  # shown once
    delivery = WebhookDelivery.objects.get()
    row = page.locator(f'tr[data-delivery-id="{delivery.pk}"]')
    assert "webhook.test" in row.inner_text()
    assert "pending" in row.inner_text()
    page.screenshot(path="/tmp/webhooks.png", full_page=True)
    assert [e for e in page.console.errors if not re.search("favicon", e)] == []


# --- layout: nothing cut, nothing overlapping -------------------------------------------------


def _alert_history(ns, flips: int = 5):
    """``flips`` alerts raised and resolved on the unused injection rate, the last still open:
    written by the service the 24 h snapshots call."""
    from django.utils import timezone

    from feedback import alerts
    from feedback.selectors import namespace_metrics

    evaluated = namespace_metrics(ns)["metrics"]
    now = timezone.now().replace(microsecond=0)
    for k in range(flips * 2 - 1):
        state = "alert" if k % 2 == 0 else "ok"
        evaluated["unused_injection_rate"].update(state=state, value=0.61 if k % 2 == 0 else 0.5)
        at = now - timedelta(hours=6 * (flips * 2 - k)) + timedelta(minutes=4)
        alerts.alerts_apply(namespace_id=ns.pk, evaluated=evaluated, window={"hours": 24}, at=at)


OVERFLOWING = """(selector) => [...document.querySelectorAll(selector)]
    .filter((el) => el.scrollWidth > el.clientWidth + 1)
    .map((el) => `${el.className}: ${el.scrollWidth} > ${el.clientWidth}`)"""


TICKS_OUTSIDE_THEIR_CHART = """(selector) => {
    const div = document.querySelector(selector).querySelector(".js-plotly-plot") ||
        document.querySelector(selector);
    const left = div.getBoundingClientRect().left;
    const out = [];
    for (const [name, axis] of Object.entries(div._fullLayout)) {
        if (!/^xaxis[0-9]*$/.test(name)) continue;
        const id = axis._id;
        for (const t of div.querySelectorAll(`.xaxislayer-above .${id}tick text`)) {
            const box = t.getBoundingClientRect();
            if (!box.width || getComputedStyle(t).display === "none") continue;
            const x0 = box.left - left, x1 = box.right - left;
            if (x0 < axis._offset - 2 || x1 > axis._offset + axis._length + 2)
                out.push(`${id}: ${t.textContent}`);
        }
    }
    return out;
}"""


def test_the_alert_history_and_metric_trends_fit_their_cards(page, live_server):
    from django.utils import timezone

    from feedback.models import MetricSnapshot
    from feedback.selectors import namespace_metrics
    from rms.models import Namespace

    review_data()
    ns = Namespace.objects.get(name="support")
    evaluated = namespace_metrics(ns)["metrics"]
    now = timezone.now()
    MetricSnapshot.objects.bulk_create(
        MetricSnapshot(
            namespace=ns, ts=now - timedelta(hours=h), window_hours=24, metrics=evaluated
        )
        for h in range(30, -1, -1)
    )
    _alert_history(ns)
    scenario.user("otto", "operator", password=PASSWORD)
    log_in(page, live_server, "otto")
    for window, width in (("24h", 1440), ("24h", 1000), ("all", 1440), ("all", 1000)):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/?namespace=support&window={window}")
        page.wait_for_selector("[data-chart='chart-trend'] .main-svg")
        assert page.locator(".alert-history tbody tr").count() >= 5
        assert page.evaluate(OVERFLOWING, ".alert-history, .alert-history .table-wrap") == []
        # Every column, For included, is inside the card.
        card = page.locator(".alert-history").bounding_box()
        for th in page.locator(".alert-history thead th").all():
            box = th.bounding_box()
            assert box["x"] + box["width"] <= card["x"] + card["width"] + 1, th.inner_text()
        # Each small multiple's date labels stay under its own chart, so none runs into the
        # neighbour's ("Dec 6, 2026Dec 5, 2026").
        outside = page.evaluate(TICKS_OUTSIDE_THEIR_CHART, "[data-chart='chart-trend']")
        assert outside == [], (window, width)
    assert page.console.errors == []


def test_evidence_rows_and_webhook_inputs_are_drawn_like_the_rest(page, live_server):
    make_namespace("support")
    scenario.user("wanda", "admin", password=PASSWORD)
    log_in(page, live_server, "wanda")
    page.goto(f"{live_server.url}/evidence/?namespace=support")
    # The last row of a table has no bottom border, in its header cell as in its data cells.
    widths = page.evaluate(
        """() => [...document.querySelectorAll('tbody tr:last-child > *')]
            .map((c) => getComputedStyle(c).borderBottomWidth)"""
    )
    assert widths and set(widths) == {"0px"}
    page.goto(f"{live_server.url}/webhooks/")
    style = """(el) => { const s = getComputedStyle(el);
        return [s.borderTopColor, s.borderRadius, s.minHeight]; }"""
    select = page.locator("select").first.evaluate(style)
    for label in ("URL", "Description"):
        assert page.get_by_label(label).evaluate(style) == select, label


def test_the_objects_alerts_and_suppressed_pages_open_cleanly(page, live_server):
    objs = review_data()
    old = make_object(
        make_client("w-old", "client", ["support"])[0],
        content="A rapid guess from last month",
        epistemic_type="UNVERIFIED",
        ts=T0 - timedelta(days=40),
    )
    scenario.user("ada", "admin", password=PASSWORD)
    log_in(page, live_server, "ada")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Objects").click()
    page.wait_for_url("**/objects/")
    assert page.get_by_role("heading", name="Objects", exact=True).is_visible()
    page.get_by_label("In alert").select_option("true")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url("**in_alert=true**")
    assert page.locator("tbody tr").count() == len(objs)
    page.get_by_label("Select all objects on this page").check()
    page.get_by_label("Pin or deprecate the selected objects with one reason").fill("kept")
    page.get_by_role("button", name="Pin selected").click()
    page.wait_for_selector(".messages .success")
    assert "Pinned 3 objects" in page.locator(".messages").inner_text()
    assert "in_alert=true" in page.url
    assert MemoryObject.objects.filter(pinned=True).count() == 3

    page.goto(f"{live_server.url}/alerts/")
    assert page.get_by_role("heading", name="Alerts", exact=True).is_visible()
    assert "No alerts recorded" in page.content()

    page.goto(f"{live_server.url}/suppressed/?namespace=support")
    assert page.get_by_role("heading", name="Suppressed memories").is_visible()
    row = page.locator("tbody tr", has_text="A rapid guess")
    assert "decayed" in row.inner_text()
    assert row.get_by_role("link", name="Open").get_attribute("href") == f"/objects/{old.pk}/"
    assert page.console.errors == []
