"""The documentation screenshots stay in step with the pages: every page the screenshot command
takes is rendered here from a small demo data set (``seed_demo``), and its structure (tabs and
headings) must match the fingerprint stored beside the PNGs when they were last taken. A page
that changes shape fails here until ``manage.py screenshots`` is rerun."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from dashboard import screenshots
from tests.dashboard.conftest import login
from tests.factories import make_client

pytestmark = pytest.mark.django_db

RETAKE = "retake them: `make run`, then `.venv/bin/python manage.py screenshots`"


@pytest.fixture
def demo(db):
    call_command("seed_demo", objects=30, sessions=60, stdout=open("/dev/null", "w"))  # noqa: SIM115
    return make_client("admin", "admin")[0].user


def test_every_screenshot_matches_the_structure_of_its_page(demo):
    stored = screenshots.stored_fingerprints()
    pages = screenshots.demo_pages()
    assert set(stored) == set(pages), RETAKE
    c = login(demo)
    for name, path in pages.items():
        response = c.get(path)
        assert response.status_code == 200, path
        assert screenshots.fingerprint(response.content.decode()) == stored[name], (
            f"{name}: the page changed shape since its screenshot; {RETAKE}"
        )


def test_there_is_one_screenshot_per_page_and_no_stale_extra():
    pngs = {p.stem for p in screenshots.SCREENSHOTS_DIR.glob("*.png")}
    assert pngs == set(screenshots.stored_fingerprints()), RETAKE


def test_a_fingerprint_names_tabs_and_headings_not_data():
    html = """<nav class="nav" aria-label="Main"><a href="/">Overview</a>
      <a href="/tasks/">Tasks</a></nav><nav aria-label="Pages"><a href="?page=2">2</a></nav>
      <h1>Alice prefers Python</h1><h2 id="h-now">What we believe <em>now</em></h2>
      <h3>Held-out  confusion matrix</h3>"""
    assert screenshots.fingerprint(html) == {
        "tabs": ["Overview", "Tasks"],
        "headings": ["h1", "h2#h-now", "h3:Held-out confusion matrix"],
    }
