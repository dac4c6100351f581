"""The hourly rollup of the windowed metric sums (``feedback.window_rollup``): a window read
partly from it equals the live sums (``session_sums`` and ``injection_sums``) — over random
sessions, with a session recorded late for a rolled-up hour, with an object that becomes
wasteful (or stops being) after its hours were rolled up, after the retention pass deleted
rows the hours held, and after an aggregate rebuild — and a rerun changes nothing."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from feedback import retention, selectors, window_rollup, window_sums
from feedback.models import (
    FeedbackAggregate,
    FeedbackSession,
    WasteMember,
    WindowHour,
    WindowRollupMark,
)
from feedback.selectors import injection_sums, metric_inputs, session_sums
from feedback.window_sums import Plan, Sums
from rms.models import Namespace
from tests.dashboard.conftest import T0, record, session_body
from tests.factories import make_client, make_namespace, make_object, run_without_django

NOW = T0 + timedelta(days=3, hours=5, minutes=20)


def live(ids, since, until) -> dict[int, Sums]:
    """The live forms, as ``Sums`` (a namespace without rows: none); injections scanned (the
    all-time form reads the aggregates, which keep what the retention pass deleted)."""
    s = session_sums(ids, since, until)
    i = injection_sums(ids, since or datetime(2000, 1, 1, tzinfo=UTC), until)
    out = {}
    for ns in set(s) | set(i):
        a, b = s.get(ns, {}), i.get(ns, {})
        out[ns] = Sums(
            a.get("n") or 0,
            a.get("corrected") or 0,
            a.get("budget") or 0,
            b.get("n") or 0,
            b.get("unused") or 0,
            b.get("wasted") or 0,
        )
    return {ns: v for ns, v in out.items() if v != Sums()}


def rolled(ids, since, until) -> dict[int, Sums]:
    got = window_rollup.window_sums_by_namespace(ids, since, until)
    return {ns: v for ns, v in got.items() if v != Sums()}


def windows(start: datetime) -> list[tuple]:
    """Whole-hour, partial-hour, open and closed windows over the data."""
    out = [(None, None), (start, None), (None, NOW), (start, NOW)]
    for k in range(12):
        since = start + timedelta(hours=7 * k, minutes=13 * k)
        out += [(since, None), (since, since + timedelta(hours=5 + k))]
    out.append((T0 + timedelta(hours=2), T0 + timedelta(hours=3)))  # exact hours, end included
    return out


def assert_equal_everywhere(ids, start):
    checked = 0
    for since, until in windows(start):
        expected = live(ids, since, until)
        assert rolled(ids, since, until) == expected, (since, until)
        checked += sum(v.injections for v in expected.values())
    assert checked > 0


def hours_snapshot():
    return sorted(
        WindowHour.objects.values_list(
            "namespace_id", "hour", "sessions", "corrected", "budget", "injections", "unused",
            "wasted",
        )
    )  # fmt: skip


@pytest.fixture
def ns(db):
    return make_namespace("support"), make_namespace("billing")


def sessions(writer, objs, n, rng, start, hours):
    bodies = []
    for k in range(n):
        picked = rng.sample(objs, rng.randint(1, min(4, len(objs))))
        signals = [
            (o.pk, rng.choice(["REFERENCED", "CONFIRMED", "CORRECTED", "UNUSED"]), "explicit_user")
            for o in picked
            if rng.random() < 0.3
        ]
        costs = [(o.pk, rng.randint(5, 90)) for o in picked]
        body = session_body(
            f"{start.isoformat()}-{k}", costs, signals, budget=rng.randint(500, 3000)
        )
        # A session counts in every namespace of its scope (SPEC §10).
        body["namespace_scope"] = sorted({o.namespace.name for o in objs})
        at = start + timedelta(hours=rng.uniform(0, hours))
        if k % 7 == 0:  # exactly on the hour: the first instant of its hour, in no other
            at = at.replace(minute=0, second=0, microsecond=0)
        body["ts"] = at.isoformat()
        bodies.append(body)
    # An object's operations go forward in time: the sessions are recorded in ts order.
    for body in sorted(bodies, key=lambda b: b["ts"]):
        record(writer, body)


# --- pure -----------------------------------------------------------------------------------------


def test_the_plan_splits_a_window_into_rolled_hours_and_live_edges():
    h = datetime(2026, 6, 1, 10, tzinfo=UTC)
    through = h + timedelta(hours=5)
    tick = window_sums.TICK
    # A partial first hour and the time after the mark are live; the hours between rolled.
    since = h + timedelta(minutes=30)
    assert window_sums.plan(since, None, through) == Plan(
        (h + timedelta(hours=1), through), ((since, h + timedelta(hours=1)), (through, None))
    )
    # Whole hours, the end included: [10:00, 12:00] is 10:00 and 11:00 rolled, 12:00 live.
    until = h + timedelta(hours=2)
    assert window_sums.plan(h, until, through) == Plan((h, until), ((until, until + tick),))
    # Open start: every rolled hour; no rollup: all live; nothing whole: all live.
    assert window_sums.plan(None, None, through) == Plan((None, through), ((through, None),))
    assert window_sums.plan(since, until, None) == Plan(None, ((since, until + tick),))
    assert window_sums.plan(since, since + timedelta(minutes=5), through).rolled is None
    # A floor (rows deleted below it after the run) keeps what is below it live.
    floor = h + timedelta(hours=3)
    assert window_sums.plan(None, None, through, floor) == Plan(
        (floor, through), ((None, floor), (through, None))
    )
    assert window_sums.plan(h, None, through, window_rollup.EVERYTHING).rolled is None


def test_parts_add_up_per_namespace():
    parts = [(1, Sums(1, 0, 10, 2, 1, 5)), (2, Sums(injections=3)), (1, Sums(1, 1, 20, 0, 0, -5))]
    assert window_sums.merge(parts) == {1: Sums(2, 1, 30, 2, 1, 0), 2: Sums(injections=3)}


def test_the_pure_module_imports_without_django():
    run_without_django(
        "import sys, feedback.window_sums; assert 'django' not in sys.modules, sorted(sys.modules)"
    )


# --- against the live sums ------------------------------------------------------------------------


def test_random_sessions_read_partly_from_the_rollup_equal_the_live_sums(ns):
    rng = random.Random(20261206)
    writer = make_client("w", "client", ["support", "billing"])[0]
    objs = [make_object(writer, content=f"fact {i}", ts=T0 - timedelta(days=1)) for i in range(6)]
    objs += [
        make_object(writer, namespace="billing", content=f"bill {i}", ts=T0 - timedelta(days=1))
        for i in range(3)
    ]
    sessions(writer, objs, 60, rng, T0, 70)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    assert window_rollup.rollup_all(NOW)["rows"] > 0
    mark = WindowRollupMark.objects.get()
    assert mark.through == datetime(2026, 6, 4, 5, tzinfo=UTC)
    assert set(WasteMember.objects.values_list("object_id", flat=True)) == set(
        FeedbackAggregate.objects.filter(usage_ratio__lt=0.05).values_list("object_id", flat=True)
    )
    assert_equal_everywhere(ids, T0)
    # The metrics read the same numbers from it.
    support = Namespace.objects.get(name="support")
    since = T0 + timedelta(hours=5, minutes=7)
    expected = live([support.pk], since, None)[support.pk]
    inputs = metric_inputs(support, since)
    assert (inputs.sessions, inputs.injections, inputs.wasted_token_cost) == (
        expected.sessions,
        expected.injections,
        expected.wasted,
    )
    # All time: the sessions from the hours, the injections from the aggregates (lifetime).
    sessions_all, injections_all = selectors.window_sums(ids)
    for n in ids:
        assert sessions_all[n] == session_sums(ids)[n]
        assert injections_all[n] == {
            **injection_sums(ids)[n],
            "wasted": injections_all[n]["wasted"],
        }
        assert injections_all[n]["wasted"] == (injection_sums(ids)[n]["wasted"] or 0)
    # A rerun changes nothing.
    snapshot = hours_snapshot()
    assert window_rollup.rollup_all(NOW)["rows"] == 0
    assert hours_snapshot() == snapshot


def test_a_late_session_for_a_rolled_up_hour_counts_before_and_after_the_next_run(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = [make_object(writer, content=f"fact {i}", ts=T0 - timedelta(days=1)) for i in range(3)]
    sessions(writer, objs, 10, random.Random(3), T0, 20)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    late = make_object(writer, content="late fact", ts=T0 - timedelta(days=1))
    body = session_body("late", [(late.pk, 77)], budget=900)
    body["ts"] = (T0 + timedelta(hours=2, minutes=40)).isoformat()
    record(writer, body)
    hour = datetime(2026, 6, 1, 2, tzinfo=UTC)
    support = Namespace.objects.get(name="support").pk
    assert not WindowHour.objects.filter(namespace_id=support, hour=hour, budget__gte=900).exists()
    # Read from the hours plus the rows beyond the mark: the late session counts already.
    before = rolled(ids, T0, NOW)
    assert before == live(ids, T0, NOW)
    assert before[support].sessions == 11
    assert_equal_everywhere(ids, T0)
    # The next run recomputes that hour only.
    assert window_rollup.rollup_all(NOW)["rows"] == 1
    assert WindowHour.objects.filter(namespace_id=support, hour=hour, budget__gte=900).exists()
    assert rolled(ids, T0, NOW) == before
    assert_equal_everywhere(ids, T0)


@pytest.mark.parametrize("fold_max", [window_rollup.FOLD_MAX, 0])
def test_an_object_that_becomes_wasteful_after_its_hours_were_rolled_up(ns, monkeypatch, fold_max):
    # fold_max 0: the run recomputes every hour instead of folding the two objects in.
    monkeypatch.setattr(window_rollup, "FOLD_MAX", fold_max)
    writer = make_client("w", "client", ["support"])[0]
    obj = make_object(writer, content="once useful", ts=T0 - timedelta(days=1))
    other = make_object(writer, content="never used", ts=T0 - timedelta(days=1))
    # Hour 1: both injected, obj confirmed (usage ratio 1.0); other never used (wasteful).
    record(
        writer,
        session_body(
            "s0", [(obj.pk, 50), (other.pk, 30)], [(obj.pk, "CONFIRMED", "explicit_user")]
        ),
    )
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(T0 + timedelta(hours=6))
    support = Namespace.objects.get(name="support").pk
    assert set(WasteMember.objects.values_list("object_id", flat=True)) == {other.pk}
    assert WindowHour.objects.get(namespace_id=support, hour=T0 + timedelta(hours=1)).wasted == 30
    # Later: obj injected 20 more times without a use (1/21 < 0.05: wasteful now), and other
    # confirmed once (1/2: no longer wasteful).
    bodies = []
    for k in range(20):
        signals = [(other.pk, "CONFIRMED", "explicit_user")] if k == 0 else []
        injected = [(obj.pk, 10)] + ([(other.pk, 7)] if k == 0 else [])
        bodies.append(session_body(f"s{k + 1}", injected, signals, hours=7 + k))
    record(writer, *bodies)
    agg = FeedbackAggregate.objects.get(object_id=obj.pk)
    assert (agg.total_injections, agg.usage_ratio) == (21, 1 / 21)
    # Hour 1 from the rollup: obj's 50 tokens now wasted, other's 30 no longer.
    hour1 = (T0 + timedelta(hours=1), T0 + timedelta(hours=2) - window_sums.TICK)
    assert rolled(ids, *hour1)[support].wasted == live(ids, *hour1)[support].wasted == 50
    assert_equal_everywhere(ids, T0)
    # The next run folds both into the hours and the set.
    window_rollup.rollup_all(NOW)
    assert WindowRollupMark.objects.get().floors == {}
    assert set(WasteMember.objects.values_list("object_id", flat=True)) == {obj.pk}
    assert WindowHour.objects.get(namespace_id=support, hour=T0 + timedelta(hours=1)).wasted == 50
    assert rolled(ids, *hour1)[support].wasted == 50
    assert_equal_everywhere(ids, T0)


def test_rows_the_retention_pass_deletes_are_read_live_until_the_next_run(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = [make_object(writer, content=f"fact {i}", ts=T0 - timedelta(days=1)) for i in range(4)]
    sessions(writer, objs, 16, random.Random(5), T0, 40)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    old = list(
        FeedbackSession.objects.filter(ts__lt=T0 + timedelta(hours=13, minutes=30))
        .order_by("ts")
        .values_list("id", flat=True)
    )
    assert 2 < len(old) < 16
    with transaction.atomic():  # what the retention pass does to a batch of old sessions
        retention._delete_sessions([str(s) for s in old])
    floor = WindowRollupMark.objects.get().floors
    assert floor == {str(Namespace.objects.get(name="support").pk): "2026-06-01T14:00:00+00:00"}
    assert_equal_everywhere(ids, T0)
    window_rollup.rollup_all(NOW)
    assert WindowRollupMark.objects.get().floors == {}
    assert not WindowHour.objects.filter(hour__lt=T0 + timedelta(hours=13)).exists()
    assert_equal_everywhere(ids, T0)


def test_a_rebuild_that_moves_an_object_across_the_waste_line_is_read_live(ns):
    from feedback import rebuild

    writer = make_client("w", "client", ["support"])[0]
    objs = [make_object(writer, content=f"fact {i}", ts=T0 - timedelta(days=1)) for i in range(3)]
    sessions(writer, objs, 12, random.Random(8), T0, 30)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    # An aggregate that drifted (wasteful by mistake) when the rollup ran …
    victim = FeedbackAggregate.objects.filter(usage_ratio__gte=0.05).first()
    assert victim is not None
    right = victim.usage_ratio
    FeedbackAggregate.objects.filter(pk=victim.pk).update(
        usage_ratio=0.0, total_referenced=0, total_confirmed=0, total_task_completed=0
    )
    window_rollup.rollup_all(NOW)
    assert WasteMember.objects.filter(object_id=victim.pk).exists()
    # … is repaired by a rebuild, with no injection or signal to show it.
    rebuild.rebuild_objects([victim.pk])
    assert FeedbackAggregate.objects.get(pk=victim.pk).usage_ratio == right
    assert_equal_everywhere(ids, T0)
    window_rollup.rollup_all(NOW)
    assert not WasteMember.objects.filter(object_id=victim.pk).exists()
    assert_equal_everywhere(ids, T0)


def test_without_a_run_or_during_the_first_everything_is_live(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = [make_object(writer, content=f"fact {i}", ts=T0 - timedelta(days=1)) for i in range(3)]
    sessions(writer, objs, 6, random.Random(1), T0, 10)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    assert not WindowRollupMark.objects.exists()
    assert_equal_everywhere(ids, T0)
    # A first run under way (its mark made, no hour written yet): still all live.
    WindowRollupMark.objects.create(through=window_rollup.NOTHING)
    assert_equal_everywhere(ids, T0)


def test_beat_runs_the_rollup(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["window-rollup"]
    assert entry["task"] == "feedback.tasks.window_rollup"
    assert entry["schedule"] == settings.RMS_WINDOW_ROLLUP_EVERY
