"""Content-Security-Policy in a real Chromium: every dashboard page, its Plotly charts, the
Django admin and the API docs render with zero policy violations and no console error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# pytest-django's live server and Playwright's sync API share the test thread.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from feedback.models import FeedbackAggregate, FeedbackSession  # noqa: E402
from tests.dashboard import scenario  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "pw-dashboard-1"

#: Records every violation the page reports, across the page's whole life.
LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${where}`);
});
"""


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Debian's chromium is missing at /usr/bin/chromium")
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        browser.close()


@pytest.fixture(autouse=True)
def _no_worker_messages(monkeypatch):
    monkeypatch.setattr("taskruns.enqueue.sweep_objects", lambda ids: None)


def test_every_page_and_chart_renders_under_the_policy(chromium, live_server):
    sc = scenario.build(small=True)
    scenario.user("maria", "admin", password=PASSWORD)
    obj = FeedbackAggregate.objects.filter(namespace__name="support").first().object_id
    session = FeedbackSession.objects.filter(namespace_scope=["support"]).first()
    runs = "&".join(f"run={run.pk}" for run in sc.runs.values())
    context = chromium.new_context(viewport={"width": 1440, "height": 900})
    context.add_init_script(LISTEN)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []  # the browser's own favicon request on the admin and docs pages
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)

    response = page.goto(f"{live_server.url}/accounts/login/")
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "object-src 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    page.get_by_label("Username").fill("maria")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/")

    pages = [
        "/?window=all",
        "/?namespace=support&window=7d",
        "/review/?namespace=support",
        f"/objects/{obj}/",
        "/sessions/?namespace=support",
        f"/sessions/{session.pk}/",
        "/tasks/",
        f"/simulations/?{runs}",
        "/evidence/?namespace=support",
        "/webhooks/",
        "/admin/",
        "/admin/rms/memoryobject/",
        "/api/v1/docs",
    ]
    violations: dict[str, list[str]] = {}
    charts = 0
    for path in pages:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        for chart in page.locator("[data-chart]").all():
            chart.locator(".main-svg").first.wait_for()
            charts += 1
        if path == "/api/v1/docs":
            page.locator(".swagger-ui .info").first.wait_for()
        found = page.evaluate("window.__violations")
        if found:
            violations[path] = found
    assert violations == {}
    assert [url for url in failed if not url.endswith("/favicon.ico")] == []
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []
    assert charts >= 8  # the overview's, the object's, the simulations' and the evidence's
