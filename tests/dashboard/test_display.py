"""What the dashboard's pages say, read through the Django test client: each line agrees with
the data beside it (the sweep summary with its table, a card's "since" with the alert history),
labels and messages keep their text intact, and error pages keep the navigation."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.messages import get_messages
from django.utils import timezone

from feedback import alerts, simulations, suite
from feedback.models import MetricSnapshot
from feedback.selectors import namespace_metrics
from feedback.sweep import sweep
from rms.models import Operation
from taskruns.models import TaskRun
from tests.dashboard.conftest import T0, login, record, session_body
from tests.factories import make_client, make_object


def _ignored_objects(n: int = 3):
    """``n`` support objects injected in 20 sessions and never used: sweep candidates."""
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


def test_the_sweep_summary_counts_the_decisions_the_table_lists(admin, namespaces):
    _ignored_objects()
    sweep(namespace="support")  # the sweep after the sessions decided every candidate
    decisions = Operation.objects.filter(namespace="support", op_type="IGNORED_CHECK")
    assert decisions.count() == 3
    penalised = sum(bool(op.payload.get("applied")) for op in decisions)
    # A later ignored_sweep run finds nothing left to examine.
    TaskRun.objects.create(
        kind="ignored_sweep",
        state="succeeded",
        progress=1.0,
        result={"examined": 0, "penalized": 0, "exempt": 0, "not_penalized": 0},
    )
    html = login(admin).get("/tasks/?sweep_namespace=support").content.decode()
    section = html[html.index('id="h-sweep"') :]
    assert "No sweep has run yet" not in section
    assert "0 examined" not in section
    assert "The 3 newest decisions in support" in section
    assert f"{penalised} penalised</strong>" in section
    assert section.count('<span class="tag tag-alert">penalised</span>') == penalised


def test_no_sweep_decision_yet_is_said_once(operator, namespaces):
    html = login(operator).get("/tasks/").content.decode()
    assert "No sweep has run yet" not in html
    assert "No sweep decision in billing yet" in html


def _snapshots(ns, evaluated, hours: int) -> None:
    now = timezone.now()
    MetricSnapshot.objects.bulk_create(
        MetricSnapshot(
            namespace=ns, ts=now - timedelta(hours=h), window_hours=24, metrics=evaluated
        )
        for h in range(hours, -1, -1)
    )


def test_a_cards_alert_since_is_when_its_alert_was_raised(operator, history):
    ns = history.objects[0].namespace
    evaluated = namespace_metrics(ns)["metrics"]
    assert evaluated["high_correction_rate"]["state"] == "alert"
    _snapshots(ns, evaluated, hours=30)
    # The snapshot that raised it ran five minutes past the hour, 20 hours ago.
    raised = (timezone.now() - timedelta(hours=20)).replace(minute=5, second=0, microsecond=0)
    alerts.alerts_apply(namespace_id=ns.pk, evaluated=evaluated, window={"hours": 24}, at=raised)
    html = login(operator).get("/?namespace=support&window=all").content.decode()
    card = html[html.index('id="m-high_correction_rate"') :]
    card = card[: card.index("</article>")]
    assert f'In alert since <time datetime="{raised.isoformat()}"' in card
    assert "before" not in card


def test_an_ok_card_says_its_24h_alert_is_still_open(operator, history):
    ns = history.objects[0].namespace
    evaluated = json.loads(json.dumps(namespace_metrics(ns)["metrics"]))
    assert evaluated["budget_waste_ratio"]["state"] == "ok"
    evaluated["budget_waste_ratio"].update(state="alert", value=0.5)
    raised = timezone.now().replace(microsecond=0) - timedelta(hours=3)
    alerts.alerts_apply(namespace_id=ns.pk, evaluated=evaluated, window={"hours": 24}, at=raised)
    html = login(operator).get("/?namespace=support&window=all").content.decode()
    card = html[html.index('id="m-budget_waste_ratio"') :]
    card = card[: card.index("</article>")]
    assert "Within threshold over this window, but the 24 h alert raised" in card
    assert "is still open" in card


def test_the_deprecation_message_cuts_the_content_at_a_word_with_an_ellipsis(admin, history):
    writer = history.writer
    obj = make_object(
        writer,
        content="Alice prefers answers with Python examples and type hints in every reply",
    )
    response = login(admin).post(f"/objects/{obj.pk}/deprecate/", {"reason": "wrong"})
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert message == "Deprecated. “Alice prefers answers with Python examples and type hints…”"


def test_benchmark_labels_keep_their_decimal_points(operator, db):
    TaskRun.objects.create(
        kind="benchmark_suite", state="succeeded", result=suite.benchmark_suite(42)
    )
    TaskRun.objects.create(
        kind="stability_simulation",
        state="succeeded",
        result=simulations.stability_simulation(7, sessions=20),
    )
    html = login(operator).get("/simulations/").content.decode()
    assert "single from 0.06" in html
    assert "single from 0 06" not in html


def test_the_evidence_page_shows_no_internal_history(operator, history):
    html = login(operator).get("/evidence/?namespace=support").content.decode()
    assert "issue #" not in html.lower()
    assert "Baseline scorer" in html


def test_the_404_page_keeps_the_navigation(operator):
    response = login(operator).get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    nav = html[html.index('<nav class="nav" aria-label="Main">') :]
    assert '<a href="/">Overview</a>' in nav
    assert "Log out" in html


def test_the_404_page_of_an_account_without_a_role_has_no_navigation(nobody):
    response = login(nobody).get("/no-such-page/")
    assert response.status_code == 404
    assert 'aria-label="Main"' not in response.content.decode()
