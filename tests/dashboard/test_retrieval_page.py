"""Retrieval quality per day (docs/METRICS.md) on the dashboard: the page and the overview's
card read the daily form, whose values equal hand-computed ones on a fixture with known ranks
and signals, and whose days add up to the unwindowed answer of the API's selector."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from dashboard.selectors import retrieval as selectors
from feedback import retrieval_quality
from feedback.selectors import namespace_retrieval_quality, retrieval_rows_daily
from tests.dashboard.conftest import login
from tests.dashboard.retrieval_fixture import DAY1, DAY2, DAY3, NOW, build_fixture


def test_daily_values_equal_hand_computed_ones_and_add_up_to_the_window(namespaces):
    ns = build_fixture()
    since = datetime(2026, 6, 4, tzinfo=UTC)
    days = retrieval_rows_daily(ns, since, NOW)
    answer = retrieval_quality.evaluate_daily(days)
    d1, d2, d3 = DAY1.date(), DAY2.date(), DAY3.date()
    assert list(answer["days"]) == [d1, d2, d3]
    one = answer["days"][d1]
    assert one["sessions"] == 2
    assert one["hit_rate"] == 1.0
    assert one["mrr"] == pytest.approx((1 / 1 + 1 / 2) / 2)
    assert one["precision_at_rank"] == {"1": 0.5, "2": 0.5, "3": 0.0}
    assert one["wasted_tokens_by_rank"] == {"1": 10, "2": 20, "3": 60}
    two = answer["days"][d2]
    assert (two["sessions"], two["hit_rate"], two["mrr"]) == (1, 0.0, 0.0)
    assert two["precision_at_rank"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    three = answer["days"][d3]
    assert (three["hit_rate"], three["mrr"]) == (1.0, pytest.approx(1 / 3))
    # The window: 4 sessions, 3 with a hit; MRR (1 + 1/2 + 0 + 1/3) / 4.
    window = answer["window"]
    assert window["sessions"] == 4
    assert window["hit_rate"] == 0.75
    assert window["mrr"] == pytest.approx((1 + 0.5 + 0 + 1 / 3) / 4)
    assert window["precision_at_rank"] == {"1": 0.25, "2": 0.25, "3": 0.25}
    assert window["wasted_tokens_by_rank"] == {"1": 30, "2": 60, "3": 90}
    # The days add up to the unwindowed form the API answers with …
    api = namespace_retrieval_quality(ns, since, NOW)
    for key in ("sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank",
                "injections_by_rank"):  # fmt: skip
        assert window[key] == pytest.approx(api[key]), key
    assert namespace_retrieval_quality(ns)["mrr"] == pytest.approx(window["mrr"])
    # … and each day is the unwindowed form over that day alone.
    for day, value in answer["days"].items():
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        alone = namespace_retrieval_quality(ns, start, start + timedelta(days=1, microseconds=-1))
        for key in ("sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank"):
            assert value[key] == pytest.approx(alone[key]), (day, key)
    # One API client's sessions only.
    mine = retrieval_quality.evaluate_daily(retrieval_rows_daily(ns, since, NOW, "other"))
    assert list(mine["days"]) == [d3]
    assert mine["window"]["hit_rate"] == 1.0


def test_the_page_and_the_overview_show_the_trend(namespaces, operator):
    build_fixture()
    with time_machine.travel(NOW, tick=False):
        response = login(operator).get("/retrieval/?namespace=support&days=7")
        assert response.status_code == 200
        trend = response.context["trend"]
        assert trend.days[0] == (NOW - timedelta(days=6)).date() and trend.days[-1] == NOW.date()
        assert trend.by_day[DAY2.date()]["hit_rate"] == 0.0
        assert trend.by_day[NOW.date()] is None
        assert trend.window["hit_rate"] == 0.75
        # Hit rate 0.75 ≥ 0.50 is ok; precision@1 0.25 < 0.30 is in alert.
        states = {a["name"]: (a["value"], a["state"]) for a in response.context["alerts"]}
        assert states == {
            "retrieval_hit_rate": (0.75, "ok"),
            "retrieval_precision_at_1": (0.25, "alert"),
        }
        rates = response.context["rates_chart"]["data"]
        hit = rates[0]["y"]
        assert hit[trend.days.index(DAY1.date())] == 1.0
        assert hit[trend.days.index(DAY2.date())] == 0.0
        assert hit[-1] is None  # no session today: a gap, never 0
        rows = {r["rank"]: r for r in response.context["rank_rows"]}
        assert (rows[1]["injections"], rows[1]["used"], rows[1]["wasted"]) == (4, 1, 30)
        html = response.content.decode()
        assert 'data-chart="chart-rates"' in html and "0.250" in html
        # One client's sessions.
        theirs = login(operator).get("/retrieval/?namespace=support&days=7&actor=other")
        assert theirs.context["trend"].window["sessions"] == 1
        # The overview links here and draws the same per-day figures.
        overview = login(operator).get("/?namespace=support")
        assert overview.context["retrieval"].window["hit_rate"] == 0.75
        assert overview.context["retrieval_chart"]["data"][0]["y"] == hit
        assert "/retrieval/?namespace=support" in overview.content.decode()
        # Bad input falls back to the defaults, never a 500.
        odd = login(operator).get("/retrieval/?namespace=support&days=abc")
        assert odd.status_code == 200 and odd.context["days"] == selectors.DEFAULT_DAYS


def test_a_namespace_the_user_cannot_see_is_404(namespaces, outsider):
    build_fixture()
    assert login(outsider).get("/retrieval/?namespace=support").status_code == 404
    page = login(outsider).get("/retrieval/")
    assert page.status_code == 200 and page.context["current"].name == "billing"
    assert "No feedback sessions in this window" in page.content.decode()
