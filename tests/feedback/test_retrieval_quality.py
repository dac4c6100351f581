"""``GET /retrieval-quality``: precision by rank, MRR, hit rate and wasted tokens, equal to
values computed by hand on sessions with known ranks and signals."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from rest_framework.test import APIClient

from feedback import retrieval_rollup
from tests.factories import (
    T0,
    make_client,
    make_namespace,
    make_objects,
    post,
    run_without_django,
    scrape,
    session,
)

URL = "/api/v1/retrieval-quality"


def quality(api, status=200, **query):
    resp = api.get(URL, {"namespace": "support", **query})
    assert resp.status_code == status, resp.json()
    return resp.json()


def at(hours: int) -> str:
    return (T0 + timedelta(hours=hours)).isoformat()


@pytest.fixture
def known(client_api):
    """Four sessions (ranks in injection order; token costs a 40, b 30, c 20, d 10):

    1 (1 h): a, b, c — b REFERENCED                       → first used at rank 2
    2 (2 h): a, c    — a CONFIRMED, c TASK_COMPLETED_WITH, d REFERENCED (not injected) → rank 1
    3 (3 h): b, d    — b CORRECTED (not a use)            → none used
    4 (4 h): c, a, d — a TASK_COMPLETED_WITH, d UNUSED    → rank 2
    """
    a, b, c, d = make_objects(client_api, 4)
    cost = {a: 40, b: 30, c: 20, d: 10}
    plan = [
        ([a, b, c], [(b, "REFERENCED")]),
        ([a, c], [(a, "CONFIRMED"), (c, "TASK_COMPLETED_WITH"), (d, "REFERENCED")]),
        ([b, d], [(b, "CORRECTED")]),
        ([c, a, d], [(a, "TASK_COMPLETED_WITH"), (d, "UNUSED")]),
    ]
    for hour, (injected, signals) in enumerate(plan, start=1):
        body = session(f"r{hour}", [(o, cost[o]) for o in injected], signals, hours=hour)
        resp = post(client_api, body)
        assert resp.status_code == 201, resp.json()
    return a, b, c, d


@pytest.mark.django_db
def test_metrics_equal_hand_computed_values(client_api, known):
    got = quality(client_api)
    assert got["sessions"] == 4
    assert got["hit_rate"] == 3 / 4
    assert got["mrr"] == pytest.approx((1 / 2 + 1 + 0 + 1 / 2) / 4)
    assert got["precision_at_rank"] == {"1": 1 / 4, "2": 3 / 4, "3": 0.0}
    assert got["wasted_tokens_by_rank"] == {"1": 40 + 30 + 20, "2": 10, "3": 20 + 10}
    assert got["injections_by_rank"] == {"1": 4, "2": 4, "3": 2}
    assert got["window"] == {"since": None, "until": None}


@pytest.mark.django_db
def test_window_selects_sessions_and_covering_window_equals_unwindowed(client_api, known):
    middle = quality(client_api, since=at(2), until=at(3))
    assert middle["sessions"] == 2
    assert middle["hit_rate"] == 1 / 2
    assert middle["mrr"] == 1 / 2
    assert middle["precision_at_rank"] == {"1": 1 / 2, "2": 1 / 2}
    assert middle["wasted_tokens_by_rank"] == {"1": 30, "2": 10}
    everything = quality(client_api, since=at(0), until=at(5))
    unwindowed = quality(client_api)
    everything.pop("window"), unwindowed.pop("window")
    assert everything == unwindowed


@pytest.mark.django_db
def test_actor_filter_keeps_the_sessions_that_client_recorded(client_api, known):
    _, token = make_client("agent-2", "client", ["support"])
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    a, b, *_ = known
    resp = post(other, session("x1", [(b, 30), (a, 40)], [(a, "REFERENCED")], hours=5))
    assert resp.status_code == 201, resp.json()
    mine = quality(client_api, actor_id="agent-2")
    assert (mine["sessions"], mine["hit_rate"], mine["mrr"]) == (1, 1.0, 0.5)
    assert mine["precision_at_rank"] == {"1": 0.0, "2": 1.0}
    assert quality(client_api, actor_id="client-1")["sessions"] == 4
    assert quality(client_api)["sessions"] == 5
    assert quality(client_api, actor_id="nobody")["sessions"] == 0


@pytest.mark.django_db
def test_a_signal_posted_alone_does_not_make_an_injection_used(client_api, known):
    _, b, *_ = known
    before = quality(client_api)
    body = {"signal_type": "CONFIRMED", "session_id": "conv-r3", "ts": at(3)}
    resp = client_api.post(f"/api/v1/objects/{b}/signals", body, format="json")
    assert resp.status_code == 201, resp.json()
    assert quality(client_api) == before


@pytest.mark.django_db
def test_an_unranked_injection_counts_for_its_session_but_at_no_rank(client_api):
    a, b = make_objects(client_api, 2)
    body = session("u1", [(a, 40), (b, 30)], [(a, "REFERENCED")])
    del body["injections"][0]["rank_position"]
    assert post(client_api, body).status_code == 201
    got = quality(client_api)
    assert (got["sessions"], got["hit_rate"], got["mrr"]) == (1, 1.0, 0.0)
    assert got["precision_at_rank"] == {"2": 0.0}
    assert got["wasted_tokens_by_rank"] == {"2": 30}


@pytest.mark.django_db
def test_query_count_does_not_grow_with_the_sessions(client_api, known, django_assert_num_queries):
    quality(client_api)  # warm the token and namespace caches, if any
    # Auth (2), the namespace, the rollup's mark (none yet), then four grouped reads, however
    # many sessions there are.
    with django_assert_num_queries(8):
        quality(client_api, since=at(0))
    post(client_api, session("more", [(known[0], 40)], [(known[0], "CONFIRMED")], hours=6))
    with django_assert_num_queries(8):
        quality(client_api, since=at(0))
    # Rolled up (T0's day is whole and finished): the mark, the late units (by id), one read of
    # the day rows, and the four grouped reads of the live tail after the mark.
    retrieval_rollup.rollup_all(T0 + timedelta(days=5))
    with django_assert_num_queries(10):
        quality(client_api, since=at(0))


@pytest.mark.django_db
def test_no_sessions_means_no_data_not_zero(client_api):
    got = quality(client_api)
    assert got["sessions"] == 0
    assert got["hit_rate"] is None and got["mrr"] is None
    assert got["precision_at_rank"] == {} and got["wasted_tokens_by_rank"] == {}


@pytest.mark.django_db
def test_scoped_and_validated(client_api, outsider_api, operator_api, known):
    assert quality(outsider_api, status=403)["error"]["code"] == "forbidden"
    assert quality(operator_api)["sessions"] == 4
    bad = quality(client_api, status=400, window="24h")
    assert "window" in bad["error"]["fields"]
    assert "since" in quality(client_api, status=400, since="soon")["error"]["fields"]
    assert "since" in quality(client_api, status=400, since=at(3), until=at(1))["error"]["fields"]
    resp = client_api.get(URL)
    assert resp.status_code == 400 and "namespace" in resp.json()["error"]["fields"]


@pytest.mark.django_db
def test_prometheus_gauges_per_namespace_over_the_last_24_hours(operator_api, client_api, known):
    make_namespace("quiet")
    with time_machine.travel(T0 + timedelta(hours=25, minutes=30), tick=False):
        found = scrape(operator_api)
    support = (("namespace", "support"),)
    # Session 1 (1 h after T0) left the window: sessions 2-4 remain.
    assert found[("rms_retrieval_hit_rate", support)] == 2 / 3
    assert found[("rms_retrieval_mrr", support)] == pytest.approx((1 + 0 + 1 / 2) / 3)
    precision = {
        dict(labels)["rank"]: v
        for (name, labels), v in found.items()
        if name == "rms_retrieval_precision_at_rank" and dict(labels)["namespace"] == "support"
    }
    assert precision == {"1": 1 / 3, "2": 2 / 3, "3": 0.0}
    assert not any(dict(labels).get("namespace") == "quiet" for _, labels in found)


def test_pure_module_imports_without_django():
    run_without_django(
        "from feedback import retrieval_quality as q\n"
        "r = q.evaluate([q.RankRow(2, 1, 1, 5, 5), q.RankRow(None, 1, 0, 3, 0)], 1, [2])\n"
        "assert r['mrr'] == 0.5 and r['precision_at_rank'] == {'2': 1.0}, r\n"
    )
