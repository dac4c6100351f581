"""The retrieval rollup (``feedback.retrieval_rollup``) read equals the live form
(``feedback.selectors.retrieval_rows_daily``) at every moment: before any run, while the first
run is under way, after it, with a session recorded late for a rolled day and a rolled hour,
with a used signal arriving after its session's day or hour was rolled, across midnight (the
day's hours become a day), after a retention delete (at once and after the next run) and on
idempotent reruns; over many window shapes and every actor."""

from __future__ import annotations

import random
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from rest_framework.test import APIClient

from feedback import retention, retrieval_rollup
from feedback import selectors as retrieval_selectors
from feedback.models import (
    FeedbackSession,
    InjectionEvent,
    RetrievalDay,
    RetrievalHour,
    RetrievalRollupMark,
    SignalRecord,
)
from feedback.retrieval_rollup import decode, floor_day, floor_hour
from feedback.selectors import retrieval_rows_daily
from rms.models import Namespace
from tests.factories import T0, make_client, make_objects, post, session

US = timedelta(microseconds=1)
M = timedelta(minutes=1)
H = timedelta(hours=1)
D = timedelta(days=1)
#: "Now" of the first runs: mid-afternoon of the fifth day, so today's hours are rolled up.
NOW = T0 + 4 * D + timedelta(hours=13, minutes=30)
ACTORS = (None, "w0", "w1")


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def normal(days: dict) -> dict:
    """``{day: DayRows}`` in a comparable form (rank rows sorted, no zero counts)."""
    return {
        day: (
            rows.sessions,
            sorted(
                (r.rank or 0, r.injections, r.used, r.token_cost, r.used_token_cost)
                for r in rows.ranks
            ),  # fmt: skip
            {rank: n for rank, n in rows.hits.items() if n},
        )
        for day, rows in days.items()
    }


def windows(now):
    """Open and closed windows, whole days, partial days and hours, edges at, just before and
    just after midnights and hours (the rolled ones and the mark's), and beyond ``now``."""
    today, hour = floor_day(now), floor_hour(now)
    edges = [today - 3 * D, today - D, today, today + 3 * H, hour - H, hour]
    shapes = [(None, None), (None, now), (today - 6 * D, now)]
    for edge in edges:
        for d in (-US, timedelta(0), US):
            shapes += [(edge + d, None), (None, edge + d), (edge + d, now)]
    shapes += [
        (today - 3 * D + 7 * H, today - 3 * D + 8 * H - US),
        (today - 4 * D + 30 * M, today + 2 * H + 17 * M),
        (today + H + 10 * M, today + 5 * H),
        (today - 3 * D, today - D),
        (now + H, None),
    ]
    return shapes


def assert_exact(ns, now) -> int:
    """Every window and actor: the rollup's read equals the live form; the sessions seen."""
    seen = 0
    for since, until in windows(now):
        for actor in ACTORS:
            live = normal(retrieval_rows_daily(ns, since, until, actor))
            rolled = normal(retrieval_rollup.retrieval_days(ns, since, until, actor))
            assert rolled == live, (since, until, actor)
            seen += sum(v[0] for v in live.values())
    return seen


def record_sessions(rng, writers, objs, first, last, n, tag):
    """``n`` random sessions with ts in [first, last), in ts order: random objects, ranks
    (some missing), used and other signals; some exactly on an hour or a midnight."""
    bodies = []
    span = (last - first).total_seconds()
    for k in range(n):
        at = first + timedelta(seconds=rng.uniform(0, span))
        if k % 5 == 0:
            at = floor_hour(at)
        picked = rng.sample(objs, rng.randint(1, 4))
        signals = [
            (oid, rng.choice(["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORRECTED"]))
            for oid in picked
            if rng.random() < 0.45
        ]
        body = session(f"{tag}{k}", [(oid, rng.randint(1, 60)) for oid in picked], signals)
        body["ts"] = at.isoformat()
        for inj in body["injections"]:
            if rng.random() < 0.15:
                del inj["rank_position"]
        bodies.append((at, rng.choice(writers), body))
    for _, writer, body in sorted(bodies, key=lambda b: b[0]):
        resp = post(writer, body)
        assert resp.status_code == 201, resp.json()


def rollup_rows(ns):
    days = sorted(RetrievalDay.objects.filter(namespace=ns).values_list(
        "day", "client_id", "sessions", "ranks", "hits"))  # fmt: skip
    hours = sorted(RetrievalHour.objects.filter(namespace=ns).values_list(
        "hour", "client_id", "sessions", "ranks", "hits"))  # fmt: skip
    return days, hours


def late_used_signal(inj: InjectionEvent) -> None:
    """A used signal on an injection whose session had none on that object, recorded after
    its unit was rolled up (the row a session's signal leaves, with the session's ts)."""
    assert not SignalRecord.objects.filter(
        feedback_session_id=inj.session_id, object_id=inj.object_id, signal_type="REFERENCED"
    ).exists()
    session_row = FeedbackSession.objects.get(pk=inj.session_id)
    SignalRecord.objects.create(
        feedback_session_id=inj.session_id,
        object_id=inj.object_id,
        namespace_id=inj.namespace_id,
        operation_id=uuid.uuid4(),
        ts=inj.ts,
        session_id=session_row.session_id,
        signal_type="REFERENCED",
        detection_method="explicit_user",
        reliability_class="high",
        base_weight=1.0,
        effective_weight=1.0,
        effect="reinforce",
        actor_id="w0",
        actor_type="agent",
    )


def unused_injection(ns, lo, hi) -> InjectionEvent:
    """An injection in [lo, hi) whose session has no used signal on its object."""
    for inj in InjectionEvent.objects.filter(namespace=ns, ts__gte=lo, ts__lt=hi).order_by("id"):
        if not SignalRecord.objects.filter(
            feedback_session_id=inj.session_id,
            object_id=inj.object_id,
            signal_type__in=["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH"],
        ).exists():
            return inj
    raise AssertionError("no unused injection in the range")


@pytest.mark.django_db
def test_the_rolled_read_equals_the_live_form_at_every_moment(namespace, monkeypatch):
    rng = random.Random(20261206)
    tokens = [make_client(f"w{i}", "client", ["support"])[1] for i in range(2)]
    writers = [api_for(t) for t in tokens]
    objs = make_objects(writers[0], 8)
    spare = make_objects(writers[0], 4)  # never injected: free for sessions with an old ts
    record_sessions(rng, writers, objs, T0 + D, NOW, 70, "a")
    ns = Namespace.objects.get(name="support")

    # No run yet: no mark, everything live.
    assert not RetrievalRollupMark.objects.exists()
    assert assert_exact(ns, NOW) > 1000

    # The first run, under way: while it computes, the reads are live (its mark says nothing
    # is rolled up); a session is recorded with a ts it rolls up (an id beyond the ones it
    # read) and the retention pass deletes the oldest session.
    real = retrieval_rollup.retrieval_rows_in
    calls = []

    def during_the_run(*args, **kwargs):
        if not calls:
            assert RetrievalRollupMark.objects.get(namespace=ns).through == retrieval_rollup.NOTHING
            assert_exact(ns, NOW)
            late = session("during", [(spare[0], 33)], [(spare[0], "CONFIRMED")])
            late["ts"] = (T0 + 2 * D + 5 * H).isoformat()
            assert post(writers[1], late).status_code == 201
            oldest = FeedbackSession.objects.order_by("ts").values_list("pk", flat=True)[:1]
            retention._delete_sessions(list(oldest))
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(retrieval_rollup, "retrieval_rows_in", during_the_run)
    assert retrieval_rollup.rollup_all(NOW)["rows"] > 0
    monkeypatch.setattr(retrieval_rollup, "retrieval_rows_in", real)
    mark = RetrievalRollupMark.objects.get(namespace=ns)
    assert mark.through == floor_hour(NOW) and mark.floor is not None  # the pass's floor stays
    assert RetrievalHour.objects.filter(namespace=ns).exists()
    # A unit holds exactly the rows up to the mark's ids: not the session recorded meanwhile
    # (it is beyond the mark, so its day is read live until the next run).
    day = T0 + 2 * D
    bounded = retrieval_selectors.retrieval_rows_in(
        ns, [(day, day + D)], by_client=True, bounds=(mark.injection_id, mark.signal_id)
    )
    stored = RetrievalDay.objects.filter(namespace=ns, day=day.date())
    assert {(r.day, r.client_id): normal({0: decode(r)}) for r in stored} == {
        key: normal({0: rows}) for key, rows in bounded.items()
    }
    assert (
        sum(r.sessions for r in stored)
        == len(
            set(
                InjectionEvent.objects.filter(ts__gte=day, ts__lt=day + D).values_list("session_id")
            )
        )
        - 1
    )
    assert assert_exact(ns, NOW) > 1000

    # The next run recomputes the late day and what lay below the floor; a rerun then changes
    # nothing.
    assert retrieval_rollup.rollup_all(NOW)["rows"] > 0
    assert RetrievalRollupMark.objects.get(namespace=ns).floor is None
    assert_exact(ns, NOW)
    rows = rollup_rows(ns)
    assert retrieval_rollup.rollup_all(NOW)["rows"] == 0
    assert retrieval_rollup.rollup_all(NOW + timedelta(minutes=20))["rows"] == 0
    assert rollup_rows(ns) == rows

    # Late sessions for a rolled day and a rolled hour of today count at once.
    today = floor_day(NOW)
    before = normal(retrieval_rows_daily(ns))
    for k, at in enumerate((T0 + 3 * D + 2 * H + US, today + 4 * H + timedelta(minutes=7))):
        late = session(f"late{k}", [(spare[1 + k], 21), (spare[3], 8)], [(spare[3], "REFERENCED")])
        late["ts"] = at.isoformat()
        assert post(writers[k], late).status_code == 201
    # Used signals arriving after their session's day and hour were rolled up.
    late_used_signal(unused_injection(ns, T0 + 2 * D, T0 + 3 * D))
    late_used_signal(unused_injection(ns, today + 2 * H, today + 3 * H))
    assert normal(retrieval_rows_daily(ns)) != before
    assert rollup_rows(ns) == rows  # nothing rolled up yet: the read takes them live
    assert_exact(ns, NOW)
    assert retrieval_rollup.rollup_all(NOW)["rows"] > 0
    assert_exact(ns, NOW)

    # Across midnight: yesterday's hours become its day, today's hours start again.
    later = NOW + D + timedelta(hours=2, minutes=5)
    record_sessions(rng, writers, objs, NOW, later, 30, "b")
    assert_exact(ns, later)
    assert retrieval_rollup.rollup_all(later)["rows"] > 0
    hours = RetrievalHour.objects.filter(namespace=ns).values_list("hour", flat=True)
    assert hours and min(hours) >= floor_day(later)
    assert RetrievalDay.objects.filter(namespace=ns, day=today.date()).exists()
    assert assert_exact(ns, later) > 1000

    # A retention delete after the run: exact at once (below the floor, read live), and after
    # the next run.
    cut = T0 + 3 * D
    old = list(FeedbackSession.objects.filter(ts__lt=cut).values_list("pk", flat=True))
    assert old
    retention._delete_sessions(old)
    assert RetrievalRollupMark.objects.get(namespace=ns).floor is not None
    assert_exact(ns, later)
    retrieval_rollup.rollup_all(later)
    assert RetrievalRollupMark.objects.get(namespace=ns).floor is None
    assert not RetrievalDay.objects.filter(namespace=ns, day__lt=cut.date()).exists()
    assert assert_exact(ns, later) > 500


@pytest.mark.django_db
def test_the_read_takes_only_the_hour_running_live(
    namespace, monkeypatch, django_assert_max_num_queries
):
    """After a run, a 7-day window reads the rolled days and hours and the rows after the mark:
    the live grouped queries cover only ts from the mark on."""
    rng = random.Random(7)
    writer = api_for(make_client("w0", "client", ["support"])[1])
    objs = make_objects(writer, 6)
    record_sessions(rng, [writer], objs, T0 + D, NOW, 30, "c")
    ns = Namespace.objects.get(name="support")
    retrieval_rollup.rollup_all(NOW)
    since = floor_day(NOW) - 6 * D
    seen = []
    real = retrieval_rollup.retrieval_rows_in

    def spy(n, ranges, *args, **kwargs):
        seen.append(ranges)
        return real(n, ranges, *args, **kwargs)

    monkeypatch.setattr(retrieval_rollup, "retrieval_rows_in", spy)
    # The mark, the late units, the day rows, the hour rows, the four grouped live reads.
    with django_assert_max_num_queries(8):
        got = retrieval_rollup.retrieval_days(ns, since, NOW)
    assert seen == [[(floor_hour(NOW), NOW + US)]]
    assert normal(got) == normal(retrieval_rows_daily(ns, since, NOW))


def test_rolled_range_units():
    """Days before the mark's midnight, hours from it; a floor moves the start to its unit."""
    through = T0 + 4 * D + 13 * H
    cut = T0 + 4 * D
    rr = retrieval_rollup.rolled_range
    assert rr(None, None, through, None) == (None, through)
    assert rr(T0 + D + 5 * H, None, through, None) == (T0 + 2 * D, through)
    assert rr(cut + 2 * H + US, None, through, None) == (cut + 3 * H, through)
    assert rr(None, cut + 5 * H + US, through, None) == (None, cut + 5 * H)
    assert rr(None, T0 + 2 * D + H, through, None) == (None, T0 + 2 * D)
    assert rr(None, None, through, T0 + D + US) == (T0 + 2 * D, through)
    assert rr(cut + 13 * H, None, through, None) is None
    assert rr(cut + 5 * H, cut + 5 * H + 30 * M, through, None) is None


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["actor", "session", "object", "namespace"])
def test_an_erasure_changes_no_rolled_number(kind, admin_api, client_api):
    """An erasure rewrites texts and actor names in place, none of what the rollup sums: the
    rolled units stay as they were and the read equals the live form, without telling it."""
    from tests.erasure.conftest import ALICE, SESSION_ID, build_personal_log, completed, erase

    log = build_personal_log(client_api)
    ns = Namespace.objects.get(name="support")
    now = T0 + 3 * D
    retrieval_rollup.rollup_all(now)
    rows = rollup_rows(ns)
    assert rows[0]
    subject = {"object": log["object"], "actor": ALICE, "session": SESSION_ID, "namespace": None}
    assert completed(erase(admin_api, kind, subject[kind]))
    assert rollup_rows(ns) == rows
    assert_exact(ns, now)
    assert retrieval_rollup.rollup_all(now)["rows"] == 0
    assert rollup_rows(ns) == rows


@pytest.mark.django_db(transaction=True)
def test_a_run_waits_for_a_writer_holding_a_lower_id(namespace):
    """PostgreSQL hands out ids before commit: a writer that took an id, then another that took
    a higher one and committed before the run read the ids, commits after the run started. The
    run waits for it (``settle_writers``), so its row is in the unit, not lost below the mark."""
    if connection.vendor != "postgresql":
        pytest.skip("one writer at a time on SQLite: no id is handed out before a commit")
    writer = api_for(make_client("w0", "client", ["support"])[1])
    a, b = make_objects(writer, 2)
    assert (
        post(writer, session("s1", [(a, 10), (b, 20)], [(a, "REFERENCED")], hours=30)).status_code
        == 201
    )
    ns = Namespace.objects.get(name="support")
    first = InjectionEvent.objects.filter(namespace=ns).order_by("id").first()
    holding, done = threading.Event(), threading.Event()

    def slow_writer():
        # A copy of an injection, on the rolled day, in a transaction left open for a while.
        with connections["default"].cursor() as cursor, transaction.atomic():
            cursor.execute(
                "INSERT INTO feedback_injectionevent (session_id, object_id, namespace_id, ts,"
                " rank_position, representation_type, token_cost, composite_score, str_value,"
                " ended_unused) SELECT session_id, object_id, namespace_id, ts, 4,"
                " representation_type, 99, composite_score, str_value, ended_unused"
                " FROM feedback_injectionevent WHERE id = %s",
                [first.id],
            )
            holding.set()
            time.sleep(1.5)
        connections["default"].close()
        done.set()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert holding.wait(10)
    # A later session commits with higher ids while the first writer still holds its own.
    assert post(writer, session("s2", [(b, 5)], [], hours=31)).status_code == 201
    retrieval_rollup.rollup_all(T0 + 3 * D)
    waited = done.is_set()
    thread.join()
    live = normal(retrieval_rows_daily(ns))
    assert any(r[0] == 4 for r in live[(T0 + D).date()][1])
    assert normal(retrieval_rollup.retrieval_days(ns)) == live
    assert waited
