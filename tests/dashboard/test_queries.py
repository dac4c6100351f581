"""Query counts of the main pages are pinned, and do not grow with the data (STYLE §10).

Each page is measured on a small history and again after more objects, sessions, runs and
relationships were added: the count must be the same number both times. The three queries every
logged-in page starts with are the session, the user and the user's ApiClient.
"""

from __future__ import annotations

import pytest
from django.core.cache import cache

from feedback import simulations
from taskruns.models import TaskRun
from tests.dashboard.conftest import build_history, login
from tests.factories import make_client

pytestmark = pytest.mark.django_db

#: page → queries: 3 for the login, then the page's own (see each view).
PAGES = {
    # namespaces, objects and aggregates binned (2) with the window rollup's mark (none here:
    # the aggregates read live), the window's sessions and injections (2), the snapshot series,
    # the alert history, the open alerts, the retrieval card's rollup mark and per-day
    # injections, used injections, sessions and best used ranks (5)
    "/": 17,
    # + the daily snapshot series of the "all" window
    "/?window=all": 18,
    # namespaces, the rollup mark (none here: all days live), the per-day injections, used
    # injections, sessions and best used ranks
    "/retrieval/?namespace=support": 9,
    "/retrieval/?namespace=support&days=90&actor=writer-1": 9,
    # namespaces, count, page, tokens spent of the page
    "/review/?namespace=support": 6,
    "/review/?namespace=support&sort=tokens&dir=desc": 6,
    # namespaces, count, page, its sessions, injections and signals of the page
    "/sessions/?namespace=support": 9,
    # runs page (count, rows), namespaces, the sweep decisions
    "/tasks/": 7,
    # count, rows, latest run of each of the 3 kinds
    "/simulations/": 8,
    # namespaces, relationships, evidence operations
    "/evidence/?namespace=support": 6,
    "/tasks/status.json?id=00000000-0000-0000-0000-000000000000": 4,
}


def grow(scale: int) -> dict:
    writer = make_client(f"writer-{scale}", "client", ["support"])[0]
    # 20 or more sessions: every object but the first (confirmed each time) is due for review.
    history = build_history(writer, objects=3 * scale, sessions=20 + scale)
    for k in range(scale):
        TaskRun.objects.create(
            kind="precision_simulation",
            state="succeeded",
            params={"seed": k},
            result=simulations.precision_simulation(k, sessions=10),
        )
        TaskRun.objects.create(kind="verify_chain", state="running", progress=0.5)
    return {
        "object": f"/objects/{history.objects[0].pk}/",
        "session": f"/sessions/{history.sessions[-1]['id']}/",
    }


def count(django_assert_num_queries, c, path, expected):
    cache.clear()
    with django_assert_num_queries(expected):
        assert c.get(path).status_code == 200


@pytest.mark.parametrize(("path", "expected"), PAGES.items())
def test_page_query_count_is_pinned_and_flat(
    admin, namespaces, django_assert_num_queries, path, expected
):
    c = login(admin)
    grow(1)
    count(django_assert_num_queries, c, path, expected)
    grow(4)
    count(django_assert_num_queries, c, path, expected)


def test_object_and_session_pages_are_flat(admin, namespaces, django_assert_num_queries):
    c = login(admin)
    small = grow(1)
    big = grow(5)
    # object, trajectory, operations page, relationships, their other objects, the change
    # events and their webhook deliveries, the explanation's operations
    for paths in (small, big):
        count(django_assert_num_queries, c, paths["object"], 11)
        count(django_assert_num_queries, c, paths["object"] + "?explain=salience_effective", 11)
        # + the state as of T and the version then
        count(django_assert_num_queries, c, paths["object"] + "?as_of=2026-06-01T02:00", 13)
        # session, its record (the FEEDBACK_SESSION operation), injections, signals, the changes
        count(django_assert_num_queries, c, paths["session"], 8)


def test_cached_overview_reads_only_what_is_not_cached(
    admin, namespaces, django_assert_num_queries
):
    c = login(admin)
    grow(1)
    c.get("/")
    # login (3), the namespaces, the alert history and the open alerts: health, histograms and
    # snapshot series and the retrieval card are cached.
    with django_assert_num_queries(6):
        c.get("/")
