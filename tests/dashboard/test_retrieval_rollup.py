"""The retrieval rollup (``feedback.retrieval_rollup``): the page's, the overview's and the
selector's numbers read from it equal the live computation (on the hand-computed fixture, with a
window partly rolled up, and over random sessions), a rerun changes nothing, and a session
recorded late for a rolled-up day counts at once and is rolled up by the next run."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import time_machine

from dashboard.selectors import retrieval as selectors
from feedback import retention, retrieval_quality, retrieval_rollup
from feedback.models import FeedbackSession, RetrievalDay, RetrievalRollupMark
from feedback.selectors import namespace_retrieval_quality, retrieval_rows_daily
from rms.models import Namespace
from taskruns import tasks
from tests.dashboard.conftest import login, record, session_body
from tests.dashboard.retrieval_fixture import DAY1, DAY2, DAY3, NOW, build_fixture
from tests.factories import make_client, make_object

METRICS = ("sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank",
           "injections_by_rank")  # fmt: skip


def rows_snapshot(ns):
    return sorted(
        RetrievalDay.objects.filter(namespace=ns).values_list(
            "day", "client_id", "sessions", "ranks", "hits"
        ),
        key=lambda row: (row[0], row[1]),
    )


def both(ns, since, until, actor_id=None):
    live = retrieval_quality.evaluate_daily(retrieval_rows_daily(ns, since, until, actor_id))
    rolled = retrieval_quality.evaluate_daily(
        retrieval_rollup.retrieval_days(ns, since, until, actor_id)
    )
    return live, rolled


def test_fixture_partly_rolled_up_equals_live_and_a_rerun_changes_nothing(namespaces, operator):
    ns = build_fixture()
    with time_machine.travel(NOW, tick=False):
        before = login(operator).get("/retrieval/?namespace=support&days=7").context["trend"]
        # DAY1 and DAY2 (writer), DAY3 (other): every finished day; today has no session.
        assert tasks.retrieval_rollup()["rows"] == 3
    # The rollup reaches the hour running (15:00): the days before, and today's hours.
    assert RetrievalRollupMark.objects.get(namespace=ns).through == NOW
    days = {row[0] for row in rows_snapshot(ns)}
    assert days == {DAY1.date(), DAY2.date(), DAY3.date()}
    day1 = RetrievalDay.objects.get(namespace=ns, day=DAY1.date())
    # Two sessions; ranks 1..3 each injected twice; best used ranks 1 and 2.
    assert (day1.sessions, day1.hits) == (2, {"1": 1, "2": 1})
    assert day1.ranks == {"1": [2, 1, 20, 10], "2": [2, 1, 40, 20], "3": [2, 0, 60, 0]}
    # The window (its days rolled up, the hour running live) equals the live computation.
    since = datetime(2026, 6, 4, tzinfo=UTC)
    live, rolled = both(ns, since, NOW)
    assert rolled == live
    assert rolled["window"]["mrr"] == (1 + 0.5 + 1 / 3) / 4
    # The API's one-window answer is the same numbers.
    api = namespace_retrieval_quality(ns, since, NOW)
    assert {k: api[k] for k in METRICS} == {k: rolled["window"][k] for k in METRICS}
    # One client's sessions: "writer" on DAY1 and DAY2, "other" on DAY3.
    for actor in ("writer", "other", "nobody"):
        live, rolled = both(ns, since, NOW, actor)
        assert rolled == live, actor
    # A first day that starts mid-day is computed live for its part.
    live, rolled = both(ns, DAY1 + timedelta(hours=1), NOW)
    assert rolled == live and rolled["window"]["sessions"] == 3
    # The page and the overview read the rollup and show the same numbers as before it.
    with time_machine.travel(NOW, tick=False):
        selectors.cache.clear()
        after = login(operator).get("/retrieval/?namespace=support&days=7").context["trend"]
        assert (after.by_day, after.window) == (before.by_day, before.window)
        overview = login(operator).get("/?namespace=support")
        assert overview.context["retrieval"].window == before.window
        # A rerun changes nothing: nothing new, nothing to recompute.
        snapshot = rows_snapshot(ns)
        assert tasks.retrieval_rollup()["rows"] == 0
        assert rows_snapshot(ns) == snapshot


def test_a_late_session_for_a_rolled_up_day_counts_at_once(namespaces):
    ns = build_fixture()
    writer = make_client("late", "client", ["support"])[0]
    obj = make_object(writer, content="late fact", ts=DAY1 - timedelta(days=2))
    retrieval_rollup.rollup_all(NOW)
    since = datetime(2026, 6, 4, tzinfo=UTC)
    # Recorded after the run, with a ts on the rolled-up DAY1: a hit at rank 1.
    body = session_body("late", [(obj.pk, 5)], [(obj.pk, "REFERENCED", "observation")])
    body["ts"] = (DAY1 + timedelta(hours=5)).isoformat()
    record(writer, body)
    live, rolled = both(ns, since, NOW)
    # Before the next run: DAY1 is beyond the mark, so it is read live …
    assert rolled == live and rolled["window"]["sessions"] == 5
    assert (
        RetrievalDay.objects.get(namespace=ns, day=DAY1.date(), client__name="writer").sessions == 2
    )
    # … and the run recomputes that day only (the late session's own client's row is new).
    assert retrieval_rollup.rollup_all(NOW)["rows"] == 2
    live, rolled = both(ns, since, NOW)
    assert rolled == live and rolled["days"][DAY1.date()]["sessions"] == 3
    assert {d for d, *_ in rows_snapshot(ns)} == {DAY1.date(), DAY2.date(), DAY3.date()}


def test_days_the_retention_pass_deleted_leave_the_rollup(namespaces):
    ns = build_fixture()
    retrieval_rollup.rollup_all(NOW)
    since = datetime(2026, 6, 4, tzinfo=UTC)
    # The retention pass deletes the sessions before DAY2 (its delete, which tells the rollup).
    old = list(FeedbackSession.objects.filter(ts__lt=DAY2).values_list("pk", flat=True))
    retention._delete_sessions(old)
    assert RetrievalRollupMark.objects.get(namespace=ns).floor == DAY1 + timedelta(
        hours=2, microseconds=1
    )
    # At once: DAY1 is below the floor and read live (now empty).
    live, rolled = both(ns, since, NOW)
    assert rolled == live and list(rolled["days"]) == [DAY2.date(), DAY3.date()]
    retrieval_rollup.rollup_all(NOW)
    live, rolled = both(ns, since, NOW)
    assert rolled == live and list(rolled["days"]) == [DAY2.date(), DAY3.date()]
    assert {d for d, *_ in rows_snapshot(ns)} == {DAY2.date(), DAY3.date()}
    assert RetrievalRollupMark.objects.get(namespace=ns).floor is None


def test_random_sessions_rolled_up_equal_live(namespaces):
    """Random sessions over ten days (two clients, random ranks, some unranked, random used and
    unused signals): every window, whole-day or not, and each client, equal the live form."""
    rng = random.Random(20261206)
    writers = [make_client(f"w{i}", "client", ["support"])[0] for i in range(2)]
    objs = [make_object(writers[0], content=f"fact {i}", ts=DAY1 - timedelta(days=9))
            for i in range(6)]  # fmt: skip
    start = DAY1 - timedelta(days=7)
    bodies = []
    for n in range(40):
        picked = rng.sample(objs, rng.randint(1, 4))
        signals = [
            (
                o.pk,
                rng.choice(["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORRECTED"]),
                "explicit_user",
            )  # fmt: skip
            for o in picked
            if rng.random() < 0.4
        ]
        body = session_body(f"r{n}", [(o.pk, rng.randint(1, 50)) for o in picked], signals)
        at = start + timedelta(hours=rng.uniform(0, 24 * 10))
        if n % 6 == 0:  # exactly midnight: the first instant of its day, in no other day
            at = start.replace(hour=0) + timedelta(days=rng.randint(1, 9))
        body["ts"] = at.isoformat()
        for inj in body["injections"]:
            if rng.random() < 0.15:
                del inj["rank_position"]
        bodies.append((body["ts"], rng.choice(writers), body))
    # An object's operations go forward in time: the sessions are recorded in ts order.
    for _, writer, body in sorted(bodies, key=lambda b: b[0]):
        record(writer, body)
    ns = Namespace.objects.get(name="support")
    now = DAY3 + timedelta(hours=3)
    assert retrieval_rollup.rollup_all(now)["rows"] > 0
    windows = [(start, now), (start + timedelta(hours=13), now), (DAY1, DAY3), (start, DAY1)]
    midnights = {datetime.fromisoformat(b[2]["ts"]) for b in bodies if "T00:00:00" in b[2]["ts"]}
    assert midnights
    # Windows that start or end exactly at a session's midnight (both ends are included).
    windows += [(m, now) for m in sorted(midnights)] + [(start, m) for m in sorted(midnights)]
    checked = 0
    for since, until in windows:
        for actor in (None, "w0", "w1"):
            live, rolled = both(ns, since, until, actor)
            assert rolled == live, (since, until, actor)
            checked += live["window"]["sessions"]
    assert checked > 40
    snapshot = rows_snapshot(ns)
    assert RetrievalRollupMark.objects.get(namespace=ns).through == DAY3.replace(hour=12)
    assert retrieval_rollup.rollup_all(now)["rows"] == 0
    assert rows_snapshot(ns) == snapshot


def test_beat_runs_the_rollup(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["retrieval-rollup"]
    assert entry["task"] == "feedback.tasks.retrieval_rollup"
    assert entry["schedule"] == settings.RMS_RETRIEVAL_ROLLUP_EVERY
