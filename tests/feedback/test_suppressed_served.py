"""The served suppressed listing (computed ahead and cached, ``feedback.selectors.suppressed``)
answers exactly what scoring every object answers: over random namespaces with objects on and
near every threshold, through the API and the beat task, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from dashboard.tasks import warm_suppressed
from feedback import retrieval, suppression
from feedback.models import FeedbackAggregate
from feedback.selectors import namespace_profile, ranking_inputs
from feedback.selectors import suppressed as selectors
from rms.models import MemoryObject, Namespace
from tests.factories import make_object

pytestmark = pytest.mark.django_db

TYPES = ("UNVERIFIED", "ASSERTED", "OBSERVED", "CONDITIONAL", "DEPRECATED")


def reference(ns: Namespace, now, salience_below: float, k: int) -> list[tuple]:
    """Score every object at similarity 0 and 1 and compare each with the k-th best of all the
    others, sorted: the definition, without the pure function's shortcuts."""
    profile = namespace_profile(ns)
    aggs = {a.object_id: a for a in FeedbackAggregate.objects.filter(object__namespace=ns)}
    rows = []
    for obj in MemoryObject.objects.filter(namespace=ns):
        inputs = ranking_inputs(obj, aggs.get(obj.pk))
        if retrieval.eligibility(inputs, profile)[0]:
            rows.append((str(obj.pk), inputs))
    worst = {oid: retrieval.rank_one(i, 0.0, now, profile) for oid, i in rows}
    out = []
    for oid, inputs in rows:
        others = sorted((w.score for o, w in worst.items() if o != oid), reverse=True)
        kth = others[k - 1] if len(others) >= k else None
        best = retrieval.rank_one(inputs, 1.0, now, profile)
        reasons = []
        if worst[oid].salience_effective < salience_below:
            reasons.append(suppression.DECAYED)
        if kth is not None and best.score < kth:
            reasons.append(suppression.RANKED_OUT)
        if reasons:
            out.append((oid, tuple(reasons), best.salience_effective, best.score, kth))
    return sorted(out, key=lambda r: (r[3], r[0]))


def plant(api, ns: Namespace, rng: random.Random) -> None:
    """Objects of every type, ages around the decay bar, duplicates (ties at the k-th score)."""
    now = timezone.now()
    contents = []
    for i in range(rng.randint(3, 14)):
        fields = {
            "content": f"{ns.name}-{i}",
            "epistemic_type": rng.choice(TYPES),
            "confidence": rng.choice([0.1, 0.5, 0.5, 0.9, rng.random()]),
            "ts": now - timedelta(days=rng.choice([0, 1, 10, 15, 16, 30, 200])),
        }
        if fields["epistemic_type"] == "CONDITIONAL":
            fields["condition_state"] = rng.choice(["TRUE", "FALSE", "UNKNOWN"])
        contents.append(fields)
        if rng.random() < 0.3:  # an exact twin: equal scores at the bar
            contents.append({**fields, "content": fields["content"] + "-twin"})
    for fields in contents:
        deprecated = fields["epistemic_type"] == "DEPRECATED"
        if deprecated:  # created as something else, as a transition would leave it
            fields = {**fields, "epistemic_type": "ASSERTED"}
        obj = make_object(api.row, namespace=ns.name, **fields)
        if deprecated:
            MemoryObject.objects.filter(pk=obj.pk).update(epistemic_type="DEPRECATED")
        if rng.random() < 0.15:
            MemoryObject.objects.filter(pk=obj.pk).update(pinned=True)


@pytest.mark.parametrize("seed", range(6))
def test_served_listing_equals_scoring_everything(admin_api, seed):
    rng = random.Random(seed)
    ns = Namespace.objects.get(name="support")
    ns.weights = {
        "similarity": rng.choice([0.05, 0.2, 0.5]),
        "hotness": 0.1,
        "utility": 0.1,
        "confidence": rng.choice([0.3, 0.8]),
        "salience": rng.choice([0.0, 0.4]),
    }
    ns.retrieval = {"confidence_floor": rng.choice([0.0, 0.2])}
    ns.save()
    plant(admin_api, ns, rng)
    eligible = [
        r for r in reference(ns, timezone.now(), 1.0, 1) if suppression.DECAYED in r[1]
    ]  # every eligible non-pinned, non-permanent object, with its salience
    # Bars exactly at an object's effective salience (strictly below: it is not listed), a
    # default, and k at, below and above the number of eligible objects.
    bars = [0.05, 0.0, 1.0] + [r[2] for r in eligible[:2]]
    for salience_below in bars:
        for k in (1, 2, 5, len(eligible) + 1):
            cache.clear()
            url = f"/api/v1/suppressed?namespace=support&salience_below={salience_below!r}&k={k}"
            first = admin_api.get(url + "&page_size=500").json()
            assert first["cached"] is False
            served = admin_api.get(url + "&page_size=500").json()
            assert served["cached"] is True and served["now"] == first["now"]
            assert served["results"] == first["results"] and served["count"] == first["count"]
            listed = selectors.listing(ns, salience_below=salience_below, k=k)
            assert listed.cached
            expected = reference(ns, listed.now, salience_below, k)
            got = [
                (f.object_id, f.reasons, f.salience_effective, f.best_score, f.kth_floor_score)
                for f in listed.findings
            ]
            assert got == expected
            assert [r["id"] for r in served["results"]] == [r[0] for r in expected]
            # Asked at the served clock, the stored listing is exact and answers.
            at = listed.now.isoformat().replace("+", "%2B")
            again = admin_api.get(url + f"&page_size=500&as_of={at}").json()
            assert again["cached"] is True and again["results"] == served["results"]
            # At another clock this small namespace is scored on the request: the definition.
            past = listed.now - timedelta(days=3)
            at = past.isoformat().replace("+", "%2B")
            live = admin_api.get(url + f"&page_size=500&as_of={at}").json()
            assert live["cached"] is False and live["count"] == len(
                want := reference(ns, past, salience_below, k)
            )
            assert [r["id"] for r in live["results"]] == [r[0] for r in want]


def test_beat_task_recomputes_watched_listings(admin_api, other_namespace):
    cache.clear()
    make_object(
        admin_api.row,
        content="old",
        epistemic_type="UNVERIFIED",
        ts=timezone.now() - timedelta(days=30),
    )
    # Nobody asked: every namespace's default listing is computed (support and billing), once.
    assert warm_suppressed() == Namespace.objects.count() == 2
    assert warm_suppressed() == 0
    first = admin_api.get("/api/v1/suppressed?namespace=support&k=3").json()
    assert first["count"] == 1 and first["cached"] is False
    # A second old object arrives; the served listing keeps its clock until recomputed.
    make_object(
        admin_api.row,
        content="older",
        epistemic_type="UNVERIFIED",
        ts=timezone.now() - timedelta(days=40),
    )
    assert admin_api.get("/api/v1/suppressed?namespace=support&k=3").json()["count"] == 1
    assert warm_suppressed() == 1  # the (support, 0.05, 3) listing that was asked for
    served = admin_api.get("/api/v1/suppressed?namespace=support&k=3").json()
    assert served["cached"] is True and served["count"] == 2 and served["now"] > first["now"]
    # Another namespace's token never sees it; billing's own listing is empty.
    billing = admin_api.get("/api/v1/suppressed?namespace=billing").json()
    assert billing["count"] == 0


def test_changed_profile_is_a_new_listing(admin_api):
    cache.clear()
    ns = Namespace.objects.get(name="support")
    for c in (0.9, 0.8, 0.2):
        make_object(admin_api.row, content=f"c{c}", confidence=c)
    url = "/api/v1/suppressed?namespace=support&k=1&salience_below=0"
    assert admin_api.get(url).json()["count"] == 0
    ns.weights = {"similarity": 0.1, "hotness": 0, "utility": 0, "confidence": 0.9}
    ns.save()
    body = admin_api.get(url).json()
    # 0.2 as a perfect match: 0.1 + 0.9·0.2 = 0.28, below the best other mismatch 0.9·0.9.
    assert body["cached"] is False and body["count"] == 1
    assert body["results"][0]["best_score"] == pytest.approx(0.28, abs=1e-12)


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_warms_the_listing_the_request_serves(celery_worker, admin_api):
    if settings.RMS_CACHE != "redis":
        pytest.skip("the worker and the web process share the cache through Redis only")
    cache.clear()
    make_object(
        admin_api.row, content="old", epistemic_type="UNVERIFIED",
        ts=timezone.now() - timedelta(days=30),
    )  # fmt: skip
    url = "/api/v1/suppressed?namespace=support"
    first = admin_api.get(url).json()
    assert first["count"] == 1 and first["cached"] is False
    make_object(
        admin_api.row, content="older", epistemic_type="UNVERIFIED",
        ts=timezone.now() - timedelta(days=40),
    )  # fmt: skip
    warm_suppressed.delay()
    deadline = time.monotonic() + 60
    while (served := admin_api.get(url).json())["now"] == first["now"]:
        celery_worker.check_alive()
        assert time.monotonic() < deadline, celery_worker.log_tail()
        time.sleep(0.1)
    assert served["cached"] is True and served["count"] == 2
    assert {r["content"] for r in served["results"]} == {"older", "old"}
