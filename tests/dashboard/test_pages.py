"""What each page shows, its filters and sorting in the URL, and its empty states."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from feedback import simulations, suite
from feedback.models import FeedbackAggregate, MetricSnapshot
from feedback.selectors import namespace_metrics
from rms.models import Operation
from taskruns.models import TaskRun
from tests.dashboard.conftest import T0, build_history, login, record, session_body
from tests.factories import make_client, make_object

pytestmark = pytest.mark.django_db


def chart(page, name: str) -> dict:
    """The Plotly figure a page embeds with json_script."""
    html = page.content.decode()
    start = html.index(f'id="{name}"')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


# --- overview ------------------------------------------------------------------------------------


def test_overview_without_namespaces_explains_how_to_create_one(operator):
    from rms.models import Namespace

    Namespace.objects.all().delete()
    page = login(operator).get("/")
    assert page.status_code == 200
    assert b"No namespaces yet" in page.content
    assert b"create_api_client" in page.content


def test_overview_without_feedback_says_so(operator, namespaces):
    page = login(operator).get("/?namespace=support")
    html = page.content.decode()
    assert "No injections recorded yet" in html
    assert "/api/v1/feedback-sessions" in html
    assert "No metric snapshots" in html
    # Metrics with no data are "no data", never 0 (SPEC §10).
    assert all(c["state"] == "no_data" for c in page.context["cards"])
    assert "No data" in html


def test_overview_cards_match_the_metrics_api(operator, history):
    page = login(operator).get("/?namespace=support&window=all")
    assert page.status_code == 200
    expected = namespace_metrics(history.objects[0].namespace)["metrics"]
    cards = {c["name"]: c for c in page.context["cards"]}
    for name, metric in expected.items():
        assert cards[name]["value"] == pytest.approx(metric["value"])
        assert cards[name]["state"] == metric["state"]
        assert cards[name]["threshold"] == metric["threshold"]
    html = page.content.decode()
    # 3 decimals, threshold beside the value, state in words.
    assert f"{expected['high_correction_rate']['value']:.3f}" in html
    assert "alert if &gt; 0.100" in html
    assert "Alert" in html


def test_overview_warnings_highlight_what_feedback_cannot_fix(operator, history):
    page = login(operator).get("/?namespace=support&window=all")
    codes = {w["code"] for w in page.context["warnings"]}
    assert "systematic_extraction_errors" in codes  # 1 of 2 sessions corrected: 0.5 > 0.10
    panel = {i["code"]: i["highlighted"] for i in page.context["cannot_fix"]}
    assert panel["systematic_extraction_errors"] is True
    assert len(panel) == 3  # the panel is permanent: every item, always
    assert b"What feedback cannot fix" in page.content


def test_overview_opens_on_an_alerting_namespace_and_lists_all(operator, history):
    page = login(operator).get("/?window=all")
    assert page.context["current"].name == "support"
    summary = page.context["summary"]
    assert summary[0].namespace.name == "support"  # alerts first
    assert summary[0].state == "alert"
    assert summary[1].state == "no_data"


def test_overview_histograms_are_binned(operator, history):
    page = login(operator).get("/?namespace=support&window=all")
    usage = chart(page, "chart-usage")["data"][0]["y"]
    assert sum(usage) == FeedbackAggregate.objects.filter(namespace__name="support").count()
    confidence = chart(page, "chart-confidence")
    assert sum(sum(t["y"]) for t in confidence["data"]) == 3


def test_overview_sparkline_trend_and_alert_since_come_from_snapshots(operator, history):
    from django.utils import timezone

    ns = history.objects[0].namespace
    now = timezone.now()
    alert = namespace_metrics(ns)["metrics"]
    ok = json.loads(json.dumps(alert))
    ok["high_correction_rate"]["state"] = "ok"
    ok["high_correction_rate"]["value"] = 0.05
    rows = []
    for h in range(48, -1, -1):
        rows.append(
            MetricSnapshot(
                namespace=ns,
                ts=now - timedelta(hours=h),
                window_hours=24,
                metrics=alert if h <= 10 else ok,
            )
        )
    MetricSnapshot.objects.bulk_create(rows)
    # The live state (all time) is in alert, so the card says since when, from the snapshots.
    page = login(operator).get("/?namespace=support&window=all")
    card = next(c for c in page.context["cards"] if c["name"] == "high_correction_rate")
    assert card["sparkline"] is not None
    assert card["alert_since"] is not None
    assert not card["alert_before_history"]
    expected = (now - timedelta(hours=10)).replace(minute=0, second=0, microsecond=0)
    assert abs((card["alert_since"] - expected).total_seconds()) <= 3600
    assert "In alert since" in page.content.decode()
    trend = chart(page, "chart-trend")
    assert len(trend["data"]) >= 4


def test_overview_window_is_in_the_url(operator, history):
    c = login(operator)
    assert c.get("/?window=24h").context["window"] == "24h"
    assert c.get("/?window=bogus").context["window"] == "24h"  # the default
    page = c.get("/?namespace=support&window=30d")
    assert 'href="?namespace=support&amp;window=all"' in page.content.decode()


# --- review queue ---------------------------------------------------------------------------------


def queued(n_objects=3, injections=20):
    writer = make_client("queue-writer", "client", ["support"])[0]
    objs = [make_object(writer, content=f"stale fact {i}", ts=T0) for i in range(n_objects)]
    bodies = [
        session_body(f"q-{k}", [(o.pk, 10 + i) for i, o in enumerate(objs)], hours=1 + k)
        for k in range(injections)
    ]
    record(writer, *bodies)
    return objs


def test_review_queue_lists_objects_with_tokens_spent(operator, namespaces):
    objs = queued()
    page = login(operator).get("/review/?namespace=support")
    rows = page.context["rows"]
    assert {r.pk for r in rows} == {o.pk for o in objs}
    spent = {r.pk: r.tokens_spent for r in rows}
    assert spent[objs[2].pk] == 20 * 12
    assert b"stale fact 0" in page.content


def test_review_queue_sorts_by_every_column(operator, namespaces):
    objs = queued()
    c = login(operator)
    by_tokens = c.get("/review/?namespace=support&sort=tokens&dir=desc").context["rows"]
    assert [r.pk for r in by_tokens] == [o.pk for o in reversed(objs)]
    assert by_tokens[0].tokens_spent == 240
    for key in ("usage_ratio", "injections", "confidence", "last_use"):
        for direction in ("asc", "desc"):
            page = c.get(f"/review/?namespace=support&sort={key}&dir={direction}")
            assert page.status_code == 200
            assert len(page.context["rows"]) == 3
    header = c.get("/review/?namespace=support&sort=tokens&dir=desc").content.decode()
    assert 'aria-sort="descending"' in header


def test_review_queue_paginates_with_filters_in_the_url(operator, namespaces):
    queued()
    page = login(operator).get("/review/?namespace=support&per_page=25&type=ASSERTED")
    assert page.context["page"].paginator.count == 3
    empty = login(operator).get("/review/?namespace=support&type=OBSERVED")
    assert b"Nothing to review in support" in empty.content


def test_review_queue_empty_state_explains_the_rule(operator, history):
    page = login(operator).get("/review/?namespace=support")
    html = page.content.decode()
    assert "Nothing to review" in html
    assert "0.10" in html and "20" in html


def test_admin_sees_the_bulk_form_and_row_actions(admin, namespaces):
    objs = queued()
    html = login(admin).get("/review/?namespace=support").content.decode()
    assert 'action="/review/deprecate/"' in html
    assert f'action="/objects/{objs[0].pk}/pin/"' in html
    assert f'action="/objects/{objs[0].pk}/deprecate/"' in html
    assert 'form="bulk-deprecate"' in html


# --- object page ----------------------------------------------------------------------------------


def test_object_page_shows_state_trajectory_operations_and_relationships(operator, history):
    obj = history.objects[0]
    page = login(operator).get(f"/objects/{obj.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Alice prefers Python 0" in html
    assert "CONFIRMED" in html
    assert "REINFORCE" in html
    traj = chart(page, "chart-trajectory")
    markers = traj["data"][2]
    # Every operation on its chain is a point, facts carrying the state before them.
    assert len(markers["x"]) == Operation.objects.filter(target_id=obj.pk).count()
    assert any("REINFORCE · CONFIRMED" in d[0] for d in markers["customdata"])
    # Relationship with posterior mean and effective confidence.
    rel = page.context["relationships"][0]
    assert rel["other"].pk == history.objects[1].pk
    assert rel["mean"] == pytest.approx(7 / 11)
    assert "Alice prefers Python 1" in html


def test_object_operations_are_paginated_sortable_and_filterable(operator, history):
    obj = history.objects[0]
    c = login(operator)
    ops = Operation.objects.filter(target_id=obj.pk).order_by("seq")
    page = c.get(f"/objects/{obj.pk}/?per_page=25&sort=seq&dir=asc")
    assert [op.seq for op, _ in page.context["ops"]] == [op.seq for op in ops][:25]
    only = c.get(f"/objects/{obj.pk}/?op=REINFORCE")
    assert {op.op_type for op, _ in only.context["ops"]} == {"REINFORCE"}
    full_hash = ops.last().hash
    assert f'title="{full_hash}"' in c.get(f"/objects/{obj.pk}/").content.decode()


def test_object_as_of_shows_the_stored_state_at_that_time(operator, history):
    obj = history.objects[0]
    c = login(operator)
    first = c.get(f"/objects/{obj.pk}/?as_of=2026-06-01T01:30:00")
    view = first.context["as_of"]
    assert view["missing"] is False
    assert view["op"].ts <= T0 + timedelta(hours=1, minutes=30)
    after_first = Operation.objects.filter(target_id=obj.pk, op_type="REINFORCE").first()
    assert view["state"].confidence == pytest.approx(after_first.payload["confidence_after"])
    assert view["version"] == Operation.objects.filter(target_id=obj.pk, ts__lte=view["at"]).count()
    before = c.get(f"/objects/{obj.pk}/?as_of=2020-01-01T00:00")
    assert before.status_code == 200
    assert before.context["as_of"]["missing"] is True
    assert "did not exist" in before.content.decode()
    bad = c.get(f"/objects/{obj.pk}/?as_of=yesterday")
    assert bad.status_code == 200 and bad.context["as_of"] is None
    # past year 9999 once in UTC (ignored, not a 500), and a 20 h offset (read as UTC)
    overflow = c.get(f"/objects/{obj.pk}/?as_of=9999-12-31T23:00:00-05:00")
    assert overflow.status_code == 200 and overflow.context["as_of"] is None
    far = c.get(f"/objects/{obj.pk}/?as_of=2026-06-02T20:00:00%2B20:00")
    assert far.status_code == 200 and far.context["as_of"]["at"] == T0 + timedelta(hours=24)


def test_object_without_feedback_or_relationships(operator, history):
    obj = history.billing_object
    html = login(operator).get(f"/objects/{obj.pk}/").content.decode()
    assert "No feedback yet" in html
    assert "No relationships" in html


# --- sessions -------------------------------------------------------------------------------------


def test_sessions_list_filters_and_counts(operator, history):
    c = login(operator)
    page = c.get("/sessions/?namespace=support")
    rows = page.context["rows"]
    assert len(rows) == 2
    assert rows[0].ts > rows[1].ts  # newest first
    assert rows[0].inj["n"] == 3 and rows[0].inj["cost"] == 40 + 41 + 42
    corrected = c.get("/sessions/?namespace=support&corrected=yes").context["rows"]
    assert len(corrected) == 1
    by_sid = c.get("/sessions/?namespace=support&session_id=conv-r-1").context["rows"]
    assert [r.session.session_id for r in by_sid] == ["conv-r-1"]
    none = c.get("/sessions/?namespace=support&outcome=FAILED")
    assert b"No session matches these filters" in none.content
    oldest = c.get("/sessions/?namespace=support&sort=ts&dir=asc").context["rows"]
    assert oldest[0].ts < oldest[1].ts


def test_sessions_empty_state_points_at_the_api(operator, namespaces):
    html = login(operator).get("/sessions/?namespace=billing").content.decode()
    assert "No feedback sessions yet — post one to <code>/api/v1/feedback-sessions</code>" in html


def test_session_page_links_injections_signals_and_changes(operator, history):
    record_ = history.sessions[0]
    page = login(operator).get(f"/sessions/{record_['id']}/")
    assert page.status_code == 200
    assert [i.rank_position for i in page.context["injections"]] == [1, 2, 3]
    assert {s.signal_type for s in page.context["signals"]} == {"CONFIRMED", "CORRECTED"}
    changes = {c.object_id: c for c in page.context["changes"]}
    a, b = history.objects[0], history.objects[1]
    assert changes[a.pk].op_type == "REINFORCE"
    assert changes[b.pk].op_type == "PENALTY"
    reinforce = Operation.objects.get(
        target_id=a.pk, op_type="REINFORCE", ts=T0 + timedelta(hours=1)
    )
    assert changes[a.pk].confidence_before == reinforce.payload["confidence_before"]
    assert changes[a.pk].confidence_after == reinforce.payload["confidence_after"]
    html = page.content.decode()
    assert f'href="/objects/{a.pk}/"' in html
    # The second session's REINFORCE of the same object is not this session's change.
    assert len(page.context["changes"]) == 2


# --- tasks ----------------------------------------------------------------------------------------


def test_tasks_empty_state(operator, namespaces):
    html = login(operator).get("/tasks/").content.decode()
    assert "No task runs yet" in html
    assert "No sweep decision in billing yet" in html


def test_operator_starts_a_task_from_the_form(
    operator, namespaces, django_capture_on_commit_callbacks
):
    c = login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = c.post(
            "/tasks/start/", {"kind": "stability_simulation", "seed": "7", "sessions": ""}
        )
    assert response.status_code == 302
    run = TaskRun.objects.get()
    assert run.kind == "stability_simulation"
    assert run.params["seed"] == 7 and run.params["sessions"] == 100
    assert run.created_by == "otto-operator"
    assert len(callbacks) == 1  # enqueued after commit


def test_bad_task_params_are_reported_and_start_nothing(operator, namespaces):
    c = login(operator)
    c.post("/tasks/start/", {"kind": "stability_simulation", "seed": "seven"})
    response = c.post("/tasks/start/", {"kind": "stability_simulation", "sessions": "5000"})
    assert not TaskRun.objects.exists()
    from django.contrib.messages import get_messages

    assert any("sessions" in str(m) for m in get_messages(response.wsgi_request))
    unknown = c.post("/tasks/start/", {"kind": "make_coffee"})
    assert unknown.status_code == 302
    assert not TaskRun.objects.exists()


def test_tasks_page_lists_runs_polls_the_active_ones_and_shows_the_sweep(admin, history):
    done = TaskRun.objects.create(
        kind="verify_chain",
        state="succeeded",
        progress=1.0,
        result={"ok": True, "checked": 4, "operations": 20, "mismatch_count": 0, "mismatches": []},
    )
    running = TaskRun.objects.create(kind="benchmark_suite", state="running", progress=0.4)
    TaskRun.objects.create(kind="verify_replay", state="failed", error="Boom: disk full")
    TaskRun.objects.create(
        kind="ignored_sweep",
        state="succeeded",
        result={"examined": 5, "penalized": 2, "exempt": 1, "not_penalized": 2},
    )
    page = login(admin).get("/tasks/")
    html = page.content.decode()
    assert page.context["active"] == [str(running.pk)]
    assert f'data-poll-ids="{running.pk}"' in html
    assert "4 checked" in html
    assert "Boom: disk full" in html
    assert "2 penalised" in html
    status = login(admin).get(f"/tasks/status.json?id={running.pk}&id={done.pk}&id=junk").json()
    assert {r["id"]: r["state"] for r in status["runs"]} == {
        str(running.pk): "running",
        str(done.pk): "succeeded",
    }
    filtered = login(admin).get("/tasks/?kind=verify_chain").context["rows"]
    assert [r["run"].pk for r in filtered] == [done.pk]


# --- simulations ----------------------------------------------------------------------------------


def test_simulations_empty_state(operator):
    html = login(operator).get("/simulations/").content.decode()
    assert "No simulation results yet" in html


def test_simulations_chart_the_latest_runs_and_compare_selected(operator, db):
    stab = TaskRun.objects.create(
        kind="stability_simulation",
        state="succeeded",
        result=simulations.stability_simulation(7, sessions=20),
    )
    p1 = TaskRun.objects.create(
        kind="precision_simulation", state="succeeded", result=simulations.precision_simulation(3)
    )
    p2 = TaskRun.objects.create(
        kind="precision_simulation", state="succeeded", result=simulations.precision_simulation(42)
    )
    bench = TaskRun.objects.create(
        kind="benchmark_suite", state="succeeded", result=suite.benchmark_suite(42)
    )
    c = login(operator)
    page = c.get("/simulations/")
    html = page.content.decode()
    assert [v["run"].pk for v in page.context["stability"]] == [stab.pk]
    assert [r.pk for r in page.context["precision"]] == [p2.pk]  # the latest
    assert [r.pk for r in page.context["bench"]] == [bench.pk]
    assert "Criterion." in html and "seed 7" in html
    stability = chart(page, "chart-stability-0")
    assert len(stability["data"][4]["y"]) == 20  # the median, one point per session
    compare = c.get(f"/simulations/?run={p1.pk}&run={p2.pk}")
    precision = chart(compare, "chart-precision")
    p_at_5 = [t for t in precision["data"] if t["name"].startswith("p@5")]
    assert len(p_at_5) == 2
    assert compare.context["stability"] == []


# --- evidence -------------------------------------------------------------------------------------


def test_evidence_shows_calibration_and_detection_figures(operator, history):
    page = login(operator).get("/evidence/?namespace=support")
    rows = {r["extraction_context"]: r for r in page.context["rows"]}
    assert rows["INFERRED"]["edges"] == 1
    assert rows["INFERRED"]["observations"] == 1
    assert rows["INFERRED"]["observed"] == 1.0
    html = page.content.decode()
    assert "measured 2026-12-05" in html
    # The headline pools the fourth and fifth held-out sets (DETECTION.md rounds 6 and 7), with its
    # Wilson interval and confusion matrix; each set, the cross-encoder experiment and the
    # lexical scorer beside it.
    assert "Held-out precision" in html and "0.781" in html and "0.655" in html
    assert "0.729" in html and "0.826" in html
    assert '<td class="num">218</td><td class="num">115</td>' in html
    assert '<td class="num">61</td><td class="num">286</td>' in html
    assert "Fourth blind set" in html and "0.786 · 0.655" in html
    assert "Fifth blind set" in html and "0.777 · 0.655" in html
    assert "0.751 · 0.842" in html and "0.690 · 0.541" in html
    assert "0.978" in html  # the in-sample reference figure is still shown, below
    assert chart(page, "chart-calibration")["data"]
    assert chart(page, "chart-detection")["data"]


def test_evidence_without_relationships(operator, namespaces):
    html = login(operator).get("/evidence/?namespace=billing").content.decode()
    assert "No relationships in billing yet" in html


def test_client_sees_evidence_of_its_namespace_only(client_user, history):
    c = login(client_user)
    assert c.get("/evidence/").context["current"].name == "support"
    assert c.get("/evidence/?namespace=billing").status_code == 404


def test_more_history_renders(operator, namespaces):
    writer = make_client("w2", "client", ["support"])[0]
    build_history(writer, objects=5, sessions=4)
    for path in ("/", "/sessions/", "/review/", "/evidence/"):
        assert login(operator).get(path).status_code == 200
