"""The client's insight calls against the live server, sync and async: explain, retrieval
quality, suppressed memories, and the object listing's filters."""

from __future__ import annotations

import math
import threading
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connections
from rms_client import RMSError

from dashboard.tasks import compute_suppressed
from rms.models import Namespace
from tests.client.conftest import alist, aw, run
from tests.factories import T0, session

pytestmark = pytest.mark.django_db(transaction=True)


async def raises(call, status):
    try:
        await aw(call())
    except RMSError as err:
        assert err.status == status, err
        return err
    raise AssertionError(f"expected RMSError {status}")


def test_insight_calls(env, flavour):
    async def scenario(c):
        items = [
            {"namespace": "support", "content": "refund window is 30 days", "confidence": 0.7,
             "epistemic_type": "ASSERTED", "ts": T0.isoformat()},
            {"namespace": "support", "content": "rapid guess", "epistemic_type": "UNVERIFIED",
             "ts": T0.isoformat()},
        ]  # fmt: skip
        a, b = await aw(c.create_objects(items))
        body = session("r1", [(a["id"], 40), (b["id"], 30)], [(a["id"], "CONFIRMED")], hours=1)
        await aw(c.record_session(body))

        explained = await aw(c.explain(a["id"]))
        conf = explained["confidence"]
        assert (
            conf["start"] == 0.7
            and conf["final"] == (await aw(c.get_object(a["id"])))["confidence"]
        )
        assert [s["signal_type"] for s in conf["steps"] if s.get("signal_type")] == ["CONFIRMED"]

        quality = await aw(c.retrieval_quality("support"))
        # One session, the rank-1 memory used: hit rate 1, MRR 1, precision@1 1, @2 0.
        assert quality["sessions"] == 1 and quality["hit_rate"] == 1.0 and quality["mrr"] == 1.0

        as_of = T0 + timedelta(days=20)
        found = await aw(c.suppressed("support", as_of=as_of))
        assert [f["id"] for f in found] == [b["id"]]
        assert found[0]["reasons"] == ["decayed"]
        # UNVERIFIED is RAPID (λ = 0.2) with salience 0.5, never reinforced.
        expected = 0.5 * math.exp(-0.2 * (as_of - T0).total_seconds() / 86400)
        assert found[0]["salience_effective"] == pytest.approx(expected, abs=1e-12)
        assert await aw(c.suppressed("support", as_of=as_of, salience_below=0.001)) == []

        listed = await alist(c.list_objects("support", q="REFUND", confidence_min=0.5))
        assert [o["id"] for o in listed] == [a["id"]]
        by_conf = await alist(c.list_objects("support", sort="-confidence", page_size=1))
        assert [o["id"] for o in by_conf] == [a["id"], b["id"]]
        assert await alist(c.list_objects("support", in_alert=True)) == []
        await raises(lambda: alist(c.list_objects("support", sort="nope")), 400)
        await raises(lambda: c.suppressed("billing"), 403)
        assert await aw(c.alerts(namespace="support", metric="mean_usage_ratio")) == []

    run(flavour, env.url, env.client, scenario)


def test_suppressed_of_a_large_namespace_waits_for_the_worker(env, flavour, settings):
    """The server answers 202 with Retry-After while the worker computes the listing; the client
    asks again after it, and raises ``computing`` when it runs out of retries."""
    settings.RMS_SUPPRESSED_INLINE_OBJECTS = 0  # too large to score on the request
    cache.clear()
    uid = str(Namespace.objects.get(name="support").uid)

    def worker():  # the worker's task, run beside the live server (it writes the cache only)
        compute_suppressed(uid, 0.05, 5, None)
        connections.close_all()

    async def scenario(c):
        item = {"namespace": "support", "content": "rapid guess", "epistemic_type": "UNVERIFIED",
                "ts": (T0 - timedelta(days=40)).isoformat()}  # fmt: skip
        (made,) = await aw(c.create_objects([item]))
        return made

    made = run(flavour, env.url, env.client, scenario)

    async def impatient(c):
        err = await raises(lambda: c.suppressed("support"), 202)
        assert err.code == "computing" and err.retry_after == 5

    run(flavour, env.url, env.client, impatient, max_retries=0)

    async def patient(c):
        later = threading.Timer(0.5, worker)
        later.start()
        try:
            found = await aw(c.suppressed("support"))
        finally:
            later.join()
        assert [f["id"] for f in found] == [made["id"]] and found[0]["reasons"] == ["decayed"]

    run(flavour, env.url, env.client, patient)
