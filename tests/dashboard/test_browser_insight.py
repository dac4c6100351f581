"""In a real Chromium against a live server: the object page's waterfall (both series) and the
retrieval charts, on the overview and on the retrieval page, are drawn with no console error."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

# pytest-django's live server and Playwright's sync API share the test thread.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from tests.dashboard import scenario  # noqa: E402
from tests.dashboard.conftest import T0, record, session_body  # noqa: E402
from tests.factories import make_client, make_namespace, make_object  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
PASSWORD = "pw-dashboard-1"


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
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


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.errors = errors
    yield page
    context.close()


def _data():
    """An object signalled in 24 sessions over the last days (confirmed, referenced, corrected):
    more moves than the waterfall has bars, and per-day retrieval figures."""
    from django.utils import timezone

    make_namespace("support")
    writer = make_client("writer", "client", ["support"])[0]
    start = timezone.now() - timedelta(days=6)
    obj = make_object(writer, content="Alice prefers Python", ts=start - timedelta(days=1))
    other = make_object(writer, content="Alice uses vim", ts=start - timedelta(days=1))
    bodies = []
    for n in range(24):
        signals = [(obj.pk, "CORRECTED" if n % 5 == 4 else "CONFIRMED", "explicit_user")]
        if n % 3 == 0:
            signals.append((other.pk, "REFERENCED", "observation"))
        hours = (start - T0).total_seconds() / 3600 + 6 * n
        bodies.append(session_body(f"b-{n}", [(obj.pk, 40), (other.pk, 30)], signals, hours=hours))
    record(writer, *bodies)
    return obj


def _log_in(page, live_server):
    scenario.user("otto", "operator", password=PASSWORD)
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("otto")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/**")


def test_the_waterfall_and_the_retrieval_charts_render_without_errors(page, live_server):
    obj = _data()
    _log_in(page, live_server)

    page.goto(f"{live_server.url}/objects/{obj.pk}/")
    page.wait_for_selector("[data-chart='chart-waterfall'] .main-svg")
    # Plotly drew one waterfall bar per step shown, start and now included.
    bars = page.locator("[data-chart='chart-waterfall'] .waterfalllayer .point")
    assert bars.count() >= 10
    assert page.get_by_text("smaller steps").first.is_visible()
    assert page.locator("table.explain-steps tr.mover").count() >= 1
    page.get_by_role("link", name="Effective salience").click()
    page.wait_for_selector("[data-chart='chart-waterfall'] .main-svg")
    assert "explain=salience_effective" in page.url
    assert page.locator("table.explain-steps").get_by_text("decay").first.is_visible()

    page.goto(f"{live_server.url}/?namespace=support")
    page.wait_for_selector("[data-chart='chart-retrieval'] .main-svg")
    page.get_by_role("link", name="by rank, per client →").click()
    page.wait_for_url("**/retrieval/**")
    for chart in ("chart-rates", "chart-precision", "chart-wasted", "chart-by-rank"):
        page.wait_for_selector(f"[data-chart='{chart}'] .main-svg")
    assert page.locator("[data-chart='chart-rates'] .scatterlayer .trace").count() == 3
    assert page.errors == []
