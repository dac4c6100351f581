"""``GET /retrieval-quality`` serves the whole days (and hours of today) of its window from the
retrieval rollup and computes only the partial edge units and the hour running live
(``feedback.retrieval_rollup.retrieval_window``, the function the dashboard's trends read): on
random sessions, many of them at or next to midnight, every window (unwindowed, open on either
side, edges at, just before and just after midnight) and every actor answers exactly what the
live one-window form computes."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from feedback import retrieval_quality, retrieval_rollup
from feedback.models import RetrievalDay, RetrievalHour
from feedback.selectors import retrieval_rows
from rms.models import Namespace
from tests.factories import T0, make_client, make_objects, post, session

URL = "/api/v1/retrieval-quality"
METRICS = ("sessions", "hit_rate", "mrr", "precision_at_rank", "wasted_tokens_by_rank",
           "injections_by_rank")  # fmt: skip
US = timedelta(microseconds=1)
#: The sessions' days: T0 + 1 … T0 + DAYS; "now" is on the last one, whose hours are rolled.
DAYS = 8


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def served(api, since=None, until=None, actor=None) -> dict:
    query = {"namespace": "support"}
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            query[name] = value.isoformat()
    if actor is not None:
        query["actor_id"] = actor
    resp = api.get(URL, query)
    assert resp.status_code == 200, resp.json()
    return {k: resp.json()[k] for k in METRICS}


def live(ns, since=None, until=None, actor=None) -> dict:
    answer = retrieval_quality.evaluate(*retrieval_rows(ns, since, until, actor))
    return {k: answer[k] for k in METRICS}


def midnight(day: int) -> datetime:
    return T0 + timedelta(days=day)


def random_sessions(rng: random.Random, writers, objs) -> list[tuple]:
    """(ts, writer api, body) of sessions over DAYS days; a third at midnight's edges."""
    out = []
    for n in range(60):
        picked = rng.sample(objs, rng.randint(1, 4))
        signals = [
            (oid, rng.choice(["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORRECTED"]))
            for oid in picked
            if rng.random() < 0.45
        ]
        body = session(f"q{n}", [(oid, rng.randint(1, 60)) for oid in picked], signals)
        if n % 3 == 0:  # the last instant of a day, its midnight, or the instant after
            at = midnight(rng.randint(2, DAYS)) + rng.choice([-US, timedelta(0), US])
        else:
            at = midnight(1) + timedelta(hours=rng.uniform(0, 24 * DAYS - 1))
        body["ts"] = at.isoformat()
        for inj in body["injections"]:
            if rng.random() < 0.15:
                del inj["rank_position"]
        out.append((at, rng.choice(writers), body))
    return sorted(out, key=lambda s: s[0])


@pytest.mark.django_db
def test_served_from_the_rollup_equals_live_on_every_window(namespace):
    rng = random.Random(20261206)
    operator = api_for(make_client("otto", "operator")[1])
    tokens = [make_client(f"w{i}", "client", ["support"])[1] for i in range(2)]
    writers = [api_for(t) for t in tokens]
    objs = make_objects(writers[0], 7)
    for _, writer, body in random_sessions(rng, writers, objs):
        resp = post(writer, body)
        assert resp.status_code == 201, resp.json()
    ns = Namespace.objects.get(name="support")
    now = midnight(DAYS) + timedelta(hours=20)
    assert retrieval_rollup.rollup_all(now)["rows"] > 0
    rolled_days = set(RetrievalDay.objects.filter(namespace=ns).values_list("day", flat=True))
    assert max(rolled_days) == (now - timedelta(days=1)).date()
    assert RetrievalHour.objects.filter(namespace=ns).exists()
    edges = [midnight(d) + e for d in (2, 4, DAYS - 1) for e in (-US, timedelta(0), US)]
    windows = [(None, None), (midnight(3) + timedelta(hours=5), None)]
    windows += [(edge, None) for edge in edges] + [(None, edge) for edge in edges]
    windows += [(midnight(1), midnight(5)), (edges[0], edges[-1]), (edges[2], now)]
    windows += [(midnight(5) + timedelta(hours=3), midnight(5) + timedelta(hours=9))]
    sessions = 0
    for since, until in windows:
        for actor in (None, "w0", "w1"):
            expected = live(ns, since, until, actor)
            assert served(operator, since, until, actor) == expected, (since, until, actor)
            sessions += expected["sessions"]
    assert sessions > 500  # the windows hold sessions, at the edges too
    assert live(ns)["sessions"] == 60


@pytest.mark.django_db
def test_a_session_recorded_after_the_run_counts_at_once(namespace):
    """A session recorded after the rollup's run with a ts on a rolled-up day is in the served
    answer at once (its day is read live until the next run recomputes it)."""
    operator = api_for(make_client("otto", "operator")[1])
    writer = api_for(make_client("w0", "client", ["support"])[1])
    a, b = make_objects(writer, 2)
    for hours in (30, 60):
        body = session(f"s{hours}", [(a, 10), (b, 20)], [(b, "REFERENCED")], hours=hours)
        assert post(writer, body).status_code == 201
    ns = Namespace.objects.get(name="support")
    now = datetime(2026, 6, 8, 12, tzinfo=UTC)
    retrieval_rollup.rollup_all(now)
    assert served(operator) == live(ns)
    late = session("late", [(a, 10)], [(a, "CONFIRMED")], hours=80)
    assert post(writer, late).status_code == 201
    assert served(operator) == live(ns) and live(ns)["sessions"] == 3
    retrieval_rollup.rollup_all(now)
    assert served(operator) == live(ns)
    assert served(operator)["mrr"] == pytest.approx((0.5 + 0.5 + 1) / 3)
