"""The documentation screenshots: which demo pages they show, and each page's structural
fingerprint (its tabs and headings), stored beside the PNGs in ``docs/screenshots/pages.json``.

``manage.py screenshots`` takes the pictures from a running ``make run`` demo and writes the
fingerprints; a test renders the same pages from a small demo data set and compares, so a page
that changes shape without new screenshots fails the build. Pixels are not compared: the demo's
numbers move with the clock and the seed, its structure does not.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

SCREENSHOTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
FINGERPRINTS = SCREENSHOTS_DIR / "pages.json"
HEADINGS = ("h1", "h2", "h3")


class _Structure(HTMLParser):
    """Collects the main navigation's tab labels and the page's headings, in document order.

    A heading is named by its ``id`` (the templates give data-bearing headings stable ids) or,
    without one, by its text; ``h1`` is named by its tag alone, as on the object and session
    pages it is the data itself.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tabs: list[str] = []
        self.headings: list[str] = []
        self._in_nav = False
        self._tab: list[str] | None = None
        self._heading: tuple[str, list[str]] | None = None
        self._heading_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "nav" and attr.get("aria-label") == "Main":
            self._in_nav = True
        elif tag == "a" and self._in_nav:
            self._tab = []
        elif tag in HEADINGS and self._heading is None:
            if tag == "h1":
                self.headings.append("h1")
            elif attr.get("id"):
                self.headings.append(f"{tag}#{attr['id']}")
            else:
                self._heading = (tag, [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav" and self._in_nav:
            self._in_nav = False
        elif tag == "a" and self._tab is not None:
            self.tabs.append(" ".join("".join(self._tab).split()))
            self._tab = None
        elif self._heading is not None and tag == self._heading[0]:
            self.headings.append(f"{tag}:{' '.join(''.join(self._heading[1]).split())}")
            self._heading = None

    def handle_data(self, data: str) -> None:
        if self._tab is not None:
            self._tab.append(data)
        if self._heading is not None:
            self._heading[1].append(data)


def fingerprint(html: str) -> dict[str, list[str]]:
    """The structure of one dashboard page: ``{"tabs": [...], "headings": [...]}``."""
    parser = _Structure()
    parser.feed(html)
    parser.close()
    return {"tabs": parser.tabs, "headings": parser.headings}


def demo_pages() -> dict[str, str]:
    """Screenshot name → dashboard path, chosen from the demo data (``seed_demo``) in the
    database: the bloated ``devops`` namespace's overview and queue, the richest ``support``
    object and session, and every finished simulation run compared."""
    from feedback.models import FeedbackAggregate, FeedbackSession
    from taskruns.models import TaskRun

    agg = (
        FeedbackAggregate.objects.filter(namespace__name="support", object__pinned=False)
        .order_by("-total_confirmed", "-total_injections", "object_id")
        .first()
    )
    recent = list(
        FeedbackSession.objects.filter(namespace_scope=["support"]).order_by("-ts", "pk")[:60]
    )
    session = max(
        recent,
        key=lambda s: (
            len(s.record.get("injected_object_ids", [])) >= 6,
            len(s.record.get("signals", [])),
        ),
        default=None,
    )
    runs = TaskRun.objects.filter(
        kind__in=("stability_simulation", "precision_simulation", "benchmark_suite"),
        state=TaskRun.SUCCEEDED,
    ).order_by("created_at", "pk")
    pages = {
        "overview": "/?namespace=devops&window=7d",
        "review-queue": "/review/?namespace=devops",
        "object": f"/objects/{agg.object_id}/" if agg else None,
        "session": f"/sessions/{session.pk}/" if session else None,
        "sessions": "/sessions/?namespace=support",
        "retrieval": "/retrieval/?namespace=support&days=30",
        "tasks": "/tasks/",
        "simulations": "/simulations/?" + "&".join(f"run={r.pk}" for r in runs),
        "evidence": "/evidence/?namespace=support",
        "webhooks": "/webhooks/",
        "objects": "/objects/?namespace=devops&sort=injections&dir=desc",
        "alerts": "/alerts/",
        "suppressed": "/suppressed/?namespace=support",
        "erasures": "/erasures/",
        "retention": "/retention/",
    }
    missing = [name for name, path in pages.items() if path is None]
    if missing:
        raise LookupError(f"no demo data for {', '.join(missing)}: load it with seed_demo")
    return pages


def stored_fingerprints(path: Path = FINGERPRINTS) -> dict[str, dict[str, list[str]]]:
    return json.loads(path.read_text(encoding="utf-8"))


def write_fingerprints(prints: dict[str, dict[str, list[str]]], path: Path = FINGERPRINTS) -> None:
    path.write_text(json.dumps(prints, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
