"""The Retention page in a real Chromium: an admin sets a period through the form and reads the
archive's size and last pass after a retention pass."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the live server and Playwright share a thread

from feedback import retention  # noqa: E402
from rms.models import Namespace  # noqa: E402
from tests.dashboard import scenario  # noqa: E402
from tests.factories import T0, make_client, make_namespace, make_object  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "pw-retention-1"


@pytest.fixture
def page():
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.errors = errors
        yield page
        browser.close()


def test_an_admin_sets_retention_and_reads_the_archive(page, live_server, settings, tmp_path):
    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    make_namespace("billing")
    make_namespace("support")
    writer = make_client("writer", "client", ["support"])[0]
    for i in range(40):
        make_object(writer, content=f"Old fact {i}", ts=T0)
    scenario.user("rita", "admin", password=PASSWORD)
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{live_server.url}/**")
    page.goto(f"{live_server.url}/retention/")
    page.get_by_label("Retention of support in days").fill("90")
    with page.expect_navigation():
        page.locator('tr[data-namespace="support"]').get_by_role("button", name="Save").click()
    assert Namespace.objects.get(name="support").retention_days == 90
    done = retention.run_namespace(Namespace.objects.get(name="support"), T0 + timedelta(days=91))
    assert done["operations"] == 40
    page.reload()
    row = page.locator('tr[data-namespace="support"]').inner_text()
    assert "90 days" in row and "40 operations" in row
    assert "keep forever" in page.locator('tr[data-namespace="billing"]').inner_text()
    page.screenshot(path="/tmp/retention.png", full_page=True)
    assert [e for e in page.errors if "favicon" not in e] == []
