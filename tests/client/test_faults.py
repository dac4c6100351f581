"""Retries through a fault-injecting proxy: 503s, 429 with Retry-After, connections dropped after
the server stored the request, timeouts. Everything is stored exactly once."""

from __future__ import annotations

import time

import pytest
from rms_client import RMSClient, RMSError

from feedback.models import FeedbackSession
from rms.models import MemoryObject, Operation, Relationship
from tests.client.conftest import FAST, FaultProxy, aw, run
from tests.factories import make_object

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = "/api/v1/feedback-sessions/batch"


def batch_faults(n, method, path):
    """A fixed, repeating pattern of faults on the batch endpoint (never 3 in a row)."""
    if path != BATCH:
        return "pass"
    if n == 1:
        return ("status", 429, 1)  # the one slow fault: the client must wait ≥ 1 s
    step = n % 6
    return {
        0: "drop_after",
        1: ("status", 503, None),
        2: "pass",
        3: ("status", 429, 0),
        4: "drop_after",
        5: "pass",
    }[step]


def _objects(n=3):
    from rms.models import ApiClient

    owner = ApiClient.objects.get(name="client-1")
    return [str(make_object(owner, content=f"fact {i}").pk) for i in range(n)]


def test_2000_interactions_through_faults_are_stored_exactly_once(env):
    ids = _objects()
    errors = []
    with FaultProxy(env.url, batch_faults) as proxy:
        client = RMSClient(proxy.url, env.client, **FAST)
        rec = client.recorder(
            flush_at=100, flush_interval=0.2, on_error=lambda b, e: errors.append(e)
        )
        request_ids = []
        for i in range(2000):
            with rec.interaction("support", context_budget=1000, session_id=f"conv-{i}") as it:
                it.injected(ids[i % 3], token_cost=40)
                it.injected(ids[(i + 1) % 3], token_cost=60, composite_score=0.5)
                it.outcome("SUCCESS")
            request_ids.append(it.request_id)
        assert rec.flush(timeout=120)
        stats = rec.stats
        rec.close()
        client.close()
    assert errors == []
    assert FeedbackSession.objects.count() == 2000
    stored = set(FeedbackSession.objects.values_list("request_id", flat=True))
    assert stored == set(request_ids)
    assert stats["queued"] == 2000 and stats["sent"] == 2000
    assert stats["failed"] == 0 and stats["dropped"] == 0 and stats["pending"] == 0
    # every dropped-after-store batch and every 503/429 was resent, once per fault
    faults = [s for s in proxy.seen if s.path == BATCH and s.action != "pass"]
    dropped_after = [s for s in faults if s.action == "drop_after"]
    assert dropped_after and all(s.upstream == 207 for s in dropped_after)  # stored, then lost
    assert stats["retried"] == pytest.approx(100 * len(faults), rel=0.05)  # batches of ≤ 100
    # Retry-After: 1 was honoured
    slow = next(i for i, s in enumerate(proxy.seen) if s.action == "('status', 429, 1)")
    assert proxy.seen[slow + 1].at - proxy.seen[slow].at >= 0.95


def lose_every_first_post():
    """Each write's first attempt is lost after the server did it; its resend is answered."""
    posts = []

    def plan(n, method, path):
        if method != "POST":
            return "pass"
        posts.append(path)
        return "drop_after" if len(posts) % 2 == 1 else "pass"

    return plan


def test_direct_writes_are_idempotent_across_lost_answers(env, flavour):
    with FaultProxy(env.url, lose_every_first_post()) as proxy:

        async def scenario(c):
            obj = await aw(
                c.create_object(namespace="support", content="Alice", epistemic_type="ASSERTED")
            )
            answer = await aw(c.signal(obj["id"], "CONFIRMED", session_id="s-1"))
            record = await aw(
                c.record_session(
                    {"session_id": "s-2", "namespace_scope": ["support"], "context_budget": 100,
                     "tokens_used": 10,
                     "injections": [{"object_id": obj["id"], "token_cost": 10}]}
                )
            )  # fmt: skip
            items = await aw(
                c.record_sessions(
                    [{"session_id": "s-3", "namespace_scope": ["support"], "context_budget": 9,
                      "tokens_used": 1}]
                )
            )  # fmt: skip
            return obj, answer, record, items

        obj, answer, record, items = run(flavour, proxy.url, env.client, scenario)
    assert proxy.count("drop_after") == 4  # each write lost once
    assert MemoryObject.objects.count() == 1  # the resend found the object (409 -> fetched)
    assert obj["content"] == "Alice"
    assert Operation.objects.filter(op_type="REINFORCE").count() == 1
    assert answer["effect"] == "reinforced"
    assert record["session_id"] == "s-2" and items[0]["status"] == 200  # the resend saw it
    assert FeedbackSession.objects.count() == 2


def test_timeouts_are_retried_and_non_idempotent_writes_are_not_resent(env, flavour):
    a, b = _objects(2)
    plan = {0: ("stall_after", 1.0)}  # the first request times out after the server acted
    with FaultProxy(env.url, lambda n, m, p: plan.get(n, "pass")) as proxy:

        async def scenario(c):
            return await aw(c.signal(a, "CONFIRMED", session_id="s-1"))

        answer = run(flavour, proxy.url, env.client, scenario, timeout=0.3)
        assert answer["effect"] == "reinforced"
        assert Operation.objects.filter(op_type="REINFORCE").count() == 1
        assert proxy.count() == 2

        # a relationship has no idempotency key: a lost answer is reported, never resent
        plan[2] = "drop_after"

        async def relate(c):
            try:
                await aw(c.create_relationship(a, b, "supports", "INFERRED"))
            except RMSError as err:
                return err
            raise AssertionError("expected the lost answer to be reported")

        err = run(flavour, proxy.url, env.client, relate)
        assert err.status is None and err.code == "connection_error"
        assert proxy.count() == 3 and Relationship.objects.count() == 1


def test_4xx_is_never_retried_and_5xx_ends_after_max_retries(env, flavour):
    with FaultProxy(env.url, lambda n, m, p: ("status", 503, 0) if n >= 1 else "pass") as proxy:

        async def scenario(c):
            try:
                await aw(c.get_object("not-a-uuid"))  # 404: once
            except RMSError as err:
                assert err.status == 404
            t0 = time.monotonic()
            try:
                await aw(c.get_object("not-a-uuid"))
            except RMSError as err:
                return err, time.monotonic() - t0
            raise AssertionError("expected 503")

        err, took = run(flavour, proxy.url, env.client, scenario, max_retries=3)
    assert proxy.count() == 1 + 4  # one 404; then the first try and 3 retries of the 503
    assert err.status == 503 and err.code == "injected" and err.retry_after == 0
    assert took < 5


def test_a_400_item_goes_to_on_error_with_its_body_and_the_rest_is_sent(env):
    ids = _objects(1)
    errors = []
    with RMSClient(env.url, env.client, **FAST) as client:
        rec = client.recorder(flush_at=10, on_error=lambda body, err: errors.append((body, err)))
        with rec.interaction("support", context_budget=100) as it:
            it.injected(ids[0], token_cost=5)
        bad = rec.interaction("support", context_budget=100)
        bad.injected("00000000-0000-4000-8000-000000000000", token_cost=5)
        bad.record()
        with rec.interaction("support", context_budget=100, request_id=it.request_id) as clash:
            clash.injected(ids[0], token_cost=6)  # same request_id, another body: 409
        rec.close()
    assert rec.stats == {"queued": 3, "sent": 1, "failed": 2, "dropped": 0, "retried": 0,
                         "pending": 0}  # fmt: skip
    assert [(body["request_id"], err.status) for body, err in errors] == [
        (bad.request_id, 400),
        (it.request_id, 409),
    ]
    assert "injections.0.object_id" in errors[0][1].fields
    assert FeedbackSession.objects.count() == 1


def test_the_async_clients_recorder_survives_the_same_faults(env):
    """AsyncRMSClient.recorder(): the same thread-based recorder (leaving an interaction only
    enqueues, so it never blocks the event loop), through the same faults."""
    import asyncio

    from rms_client import AsyncRMSClient

    ids = _objects(2)

    async def agent(proxy_url):
        async with AsyncRMSClient(proxy_url, env.client, **FAST) as client:
            rec = client.recorder(flush_at=50, flush_interval=0.1)
            for i in range(300):
                with rec.interaction("support", context_budget=100, session_id=f"a-{i}") as it:
                    it.injected(ids[i % 2], token_cost=10)
                if i % 50 == 0:
                    await asyncio.sleep(0)
            assert rec.close(timeout=60)
            return rec.stats

    with FaultProxy(env.url, batch_faults) as proxy:
        stats = asyncio.run(agent(proxy.url))
    assert stats["sent"] == 300 and stats["failed"] == 0 and stats["retried"] > 0
    assert FeedbackSession.objects.filter(session_id__startswith="a-").count() == 300
