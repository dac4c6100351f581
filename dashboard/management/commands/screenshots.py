"""``screenshots``: retake docs/screenshots/*.png from a running demo and store each page's
structural fingerprint beside them (``dashboard.screenshots``).

Start the demo (``make run``), then, with the same settings (so both read one database)::

    .venv/bin/python manage.py screenshots [--url http://127.0.0.1:8000] [--username admin]

The password is ``RMS_DEMO_PASSWORD`` (the demo's default unless set). Needs Playwright and a
Chromium (``--chromium``, default Debian's ``/usr/bin/chromium``).
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from dashboard import screenshots

VIEWPORT = {"width": 1440, "height": 900}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run"]


class Command(BaseCommand):
    help = "Retake the documentation screenshots from a running demo (make run)."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--username", default="admin")
        parser.add_argument("--chromium", default="/usr/bin/chromium")
        parser.add_argument("--out", default=str(screenshots.SCREENSHOTS_DIR))

    def handle(self, *args, url: str, username: str, chromium: str, out: str, **options):
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise CommandError("needs Playwright: pip install -e '.[test]'") from exc
        if not Path(chromium).exists():
            raise CommandError(f"no Chromium at {chromium} (--chromium PATH)")
        password = os.environ.get("RMS_DEMO_PASSWORD", "rms-demo-password")
        try:
            pages = screenshots.demo_pages()
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        base = url.rstrip("/")
        prints = {}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = browser.new_context(viewport=VIEWPORT).new_page()
            page.goto(f"{base}/accounts/login/")
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_load_state("networkidle")
            if "/accounts/login/" in page.url:
                raise CommandError(f"could not log in as {username} at {base}")
            for name, path in pages.items():
                response = page.goto(f"{base}{path}")
                if response is None or response.status != 200:
                    raise CommandError(f"{path}: HTTP {response.status if response else '?'}")
                prints[name] = screenshots.fingerprint(response.text())
                page.wait_for_load_state("networkidle")
                for chart in page.locator("[data-chart]").all():
                    chart.locator(".main-svg").first.wait_for()
                if name == "review-queue":  # a row's pin form open, as an admin sees it
                    page.locator("tbody tr").nth(1).locator("summary", has_text="Pin").click()
                page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
                self.stdout.write(f"  {name}.png  {path}")
            browser.close()
        screenshots.write_fingerprints(prints, folder / screenshots.FINGERPRINTS.name)
        self.stdout.write(self.style.SUCCESS(f"{len(prints)} screenshots in {folder}"))
