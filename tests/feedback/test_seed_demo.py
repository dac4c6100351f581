"""The demo data ``make run`` loads tells the story the README tells, on the windows a new user
sees first (the overview's 24 h, ``GET /metrics`` with no window, the alert history):
``support`` healthy, ``travel`` alerting on corrections, ``devops`` on usage, waste and unused
injections."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from tests.factories import make_client
from tests.servers import ROOT

pytestmark = pytest.mark.django_db

ALERTING = {
    "support": set(),
    "travel": {"high_correction_rate"},
    "devops": {"mean_usage_ratio", "budget_waste_ratio", "unused_injection_rate"},
}


@pytest.fixture
def demo():
    call_command("seed_demo", verbosity=0)  # the defaults ``make run`` loads
    _, token = make_client("demo-operator", "operator")
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def test_the_demo_namespaces_are_as_the_readme_says_on_the_default_windows(demo):
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        "`support` healthy, `travel` alerting on corrections, `devops` on usage, waste and unused "
        "injections — on the last 24 hours"
    ) in readme
    for name, alerting in ALERTING.items():
        answer = demo.get("/api/v1/metrics", {"namespace": name}).json()
        since, until = (datetime.fromisoformat(answer["window"][k]) for k in ("since", "until"))
        assert until - since == timedelta(hours=24), answer["window"]
        states = {metric: m["state"] for metric, m in answer["metrics"].items()}
        assert {m for m, state in states.items() if state == "alert"} == alerting, (name, answer)
        assert "no_data" not in states.values()
        # the alert history of the seeded week: the healthy namespace never flapped into alert
        history = demo.get("/api/v1/alerts", {"namespace": name}).json()["results"]
        open_now = {a["metric"] for a in history if a["state"] == "open"}
        assert open_now == alerting, (name, history)
        if not alerting:
            assert history == []


def test_the_overview_opens_on_24_hours_and_says_so_on_each_card(demo):
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.get(username="demo-operator")
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/", {"namespace": "support"})
    assert page.status_code == 200
    assert {c["name"]: c["state"] for c in page.context["cards"]} == dict.fromkeys(
        ("mean_usage_ratio", "high_correction_rate", "budget_waste_ratio",
         "unused_injection_rate"), "ok",
    )  # fmt: skip
    html = page.content.decode()
    assert html.count("Sessions of the last 24h") == 3
    assert html.count("Lifetime usage of the active objects") == 1
