"""A namespace too large to score on a request (``RMS_SUPPRESSED_INLINE_OBJECTS``) is scored only
on the worker: a miss answers 202 with Retry-After, an old listing is served marked stale while
it is recomputed, and ``as_of`` is answered from a listing computed at exactly that clock."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from dashboard.tasks import compute_suppressed, warm_suppressed
from feedback import suppression
from feedback.selectors import namespace_profile
from feedback.selectors import suppressed as selectors
from rms.models import Namespace
from tests.factories import make_object

pytestmark = pytest.mark.django_db

URL = "/api/v1/suppressed?namespace=support"


def old(api, content: str, days: int):
    return make_object(
        api.row, content=content, epistemic_type="UNVERIFIED",
        ts=timezone.now() - timedelta(days=days),
    )  # fmt: skip


def expected_ids(ns: Namespace, now) -> list[str]:
    """The pure rules over the namespace's rows at ``now``: what any listing must answer."""
    _, found = selectors.suppressed_in(ns, now)
    return [f.object_id for f in found]


@pytest.fixture
def large(settings):
    """Every namespace counts as too large to score on the request."""
    settings.RMS_SUPPRESSED_INLINE_OBJECTS = 0
    cache.clear()
    return Namespace.objects.get(name="support")


def test_a_miss_is_queued_and_answered_202_until_the_worker_stored_it(admin_api, large):
    old(admin_api, "old", 30)
    resp = admin_api.get(URL)
    assert resp.status_code == 202 and resp["Retry-After"] == str(selectors.RETRY_AFTER_SECONDS)
    assert resp.json() == {
        "namespace": "support",
        "status": "computing",
        "as_of": None,
        "retry_after": selectors.RETRY_AFTER_SECONDS,
    }
    assert admin_api.get(URL).status_code == 202  # still nothing stored
    # The worker's task (run here as the worker runs it) stores the listing.
    assert compute_suppressed(str(large.uid), 0.05, 5, None) is True
    body = admin_api.get(URL).json()
    assert body["cached"] is True and body["stale"] is False and body["refreshing"] is False
    assert body["count"] == 1 and body["results"][0]["content"] == "old"
    assert body["computed_at"] == body["now"]


def test_an_old_listing_is_served_stale_while_recomputed(admin_api, large, settings):
    old(admin_api, "old", 30)
    compute_suppressed(str(large.uid), 0.05, 5, None)
    first = admin_api.get(URL).json()
    old(admin_api, "older", 40)
    settings.RMS_SUPPRESSED_CACHE_SECONDS = 1
    time.sleep(1.1)
    stale = admin_api.get(URL).json()
    # The stored listing as it was, said to be stale, with its recomputation queued.
    assert stale["stale"] is True and stale["refreshing"] is True and stale["cached"] is True
    assert stale["now"] == first["now"] and stale["count"] == 1
    compute_suppressed(str(large.uid), 0.05, 5, None)
    fresh = admin_api.get(URL).json()
    assert fresh["stale"] is False and fresh["count"] == 2 and fresh["now"] > first["now"]
    assert [r["id"] for r in fresh["results"]] == expected_ids(
        large, datetime.fromisoformat(fresh["now"])
    )


def test_as_of_is_answered_only_from_a_listing_at_that_clock(admin_api, large):
    old(admin_api, "old", 30)
    old(admin_api, "middle", 2)  # decays below 0.05 within weeks: the clock matters
    compute_suppressed(str(large.uid), 0.05, 5, None)
    now = admin_api.get(URL).json()["now"]
    # The current listing's own clock: exact, answered at once.
    same = admin_api.get(URL + "&as_of=" + now.replace("+", "%2B"))
    assert same.status_code == 200 and same.json()["now"] == now
    # Another clock: queued, then answered from the listing computed for it.
    later = timezone.now() + timedelta(days=40)
    at = later.isoformat().replace("+", "%2B")
    pending = admin_api.get(URL + "&as_of=" + at)
    assert pending.status_code == 202 and pending.json()["as_of"] is not None
    compute_suppressed(str(large.uid), 0.05, 5, later.isoformat())
    body = admin_api.get(URL + "&as_of=" + at).json()
    assert body["cached"] is True and datetime.fromisoformat(body["now"]) == later
    assert [r["id"] for r in body["results"]] == expected_ids(large, later)
    assert body["count"] == 2 and same.json()["count"] == 1


def test_beat_stores_every_namespace_default_listing(admin_api, other_namespace, large):
    old(admin_api, "old", 30)
    assert admin_api.get(URL).status_code == 202
    assert warm_suppressed() == 2  # support and billing, nobody having looked at billing
    assert admin_api.get(URL).json()["count"] == 1
    billing = admin_api.get("/api/v1/suppressed?namespace=billing")
    assert billing.status_code == 200 and billing.json()["count"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_computes_what_the_202_asked_for(celery_worker, admin_api, settings):
    if settings.RMS_CACHE != "redis":
        pytest.skip("the worker and the web process share the cache through Redis only")
    settings.RMS_SUPPRESSED_INLINE_OBJECTS = 0
    cache.clear()
    old(admin_api, "old", 30)
    assert admin_api.get(URL).status_code == 202
    deadline = time.monotonic() + 60
    while (resp := admin_api.get(URL)).status_code == 202:
        celery_worker.check_alive()
        assert time.monotonic() < deadline, celery_worker.log_tail()
        time.sleep(0.1)
    body = resp.json()
    assert resp.status_code == 200 and body["count"] == 1
    ns = Namespace.objects.get(name="support")
    assert namespace_profile(ns) is not None
    assert [r["id"] for r in body["results"]] == expected_ids(
        ns, datetime.fromisoformat(body["now"])
    )
    assert suppression.DECAYED in body["results"][0]["reasons"]


def test_pages_read_across_blocks_equal_the_whole_listing(admin_api, large, monkeypatch):
    monkeypatch.setattr(selectors, "BLOCK", 3)  # blocks of 3 findings: pages of 4 span two
    for i in range(11):
        old(admin_api, f"old {i}", 30 + i)
    compute_suppressed(str(large.uid), 0.05, 5, None)
    pages, url = [], URL + "&page_size=4"
    while url:
        body = admin_api.get(url).json()
        pages.append([r["id"] for r in body["results"]])
        url = body["next"]
    now = datetime.fromisoformat(body["now"])
    assert [len(p) for p in pages] == [4, 4, 3]
    assert [i for p in pages for i in p] == expected_ids(large, now)
    # The dashboard's paginator reads the same blocks.
    listed = selectors.listing(large)
    assert [f.object_id for f in listed.findings[2:9]] == expected_ids(large, now)[2:9]
    assert listed.findings[10].object_id == expected_ids(large, now)[10]
    # A block evicted from the cache: the request is told to come back, not given a short page,
    # and the next request queues a recomputation.
    key = selectors._cache_key(large, namespace_profile(large), 0.05, 5)
    cache.delete(selectors._block_key(key, cache.get(key)[3], 1))
    assert admin_api.get(URL + "&page_size=2").status_code == 200  # block 0 only
    assert admin_api.get(URL + "&page_size=4").status_code == 202  # blocks 0 and 1
    assert admin_api.get(URL + "&page_size=2").status_code == 202  # queued
    compute_suppressed(str(large.uid), 0.05, 5, None)
    assert admin_api.get(URL + "&page_size=4").json()["count"] == 11


def test_a_web_process_knows_the_task_a_request_queues():
    """Django set up as gunicorn does (no test module imported the task first): the name that
    ``taskruns.enqueue`` publishes is registered, so a request's queueing does not fail."""
    import subprocess
    import sys

    code = (
        "import django; django.setup(); from rms.celery import app; "
        "from taskruns import enqueue; print(enqueue.COMPUTE_SUPPRESSED in app.tasks)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr


def test_a_recomputed_listing_drops_the_blocks_it_replaced(admin_api, large, monkeypatch):
    monkeypatch.setattr(selectors, "BLOCK", 2)
    monkeypatch.setattr(selectors, "SUPERSEDED_SECONDS", 1)
    for i in range(5):
        old(admin_api, f"old {i}", 30 + i)
    key = selectors._cache_key(large, namespace_profile(large), 0.05, 5)
    compute_suppressed(str(large.uid), 0.05, 5, None)
    before = cache.get(key)[3]
    reader = selectors.listing(large)  # holds the old head while the listing is recomputed
    compute_suppressed(str(large.uid), 0.05, 5, None)
    after = cache.get(key)[3]
    assert after != before
    # Still readable a moment later (a request mid-page), then gone; the new blocks stay.
    assert len(reader.findings[0:5]) == 5
    time.sleep(1.5)
    old_blocks = [selectors._block_key(key, before, i) for i in range(3)]
    assert cache.get_many(old_blocks) == {}
    assert len(cache.get_many([selectors._block_key(key, after, i) for i in range(3)])) == 3
    assert len(selectors.listing(large).findings[0:5]) == 5
