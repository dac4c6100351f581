"""Every direct call of RMSClient and AsyncRMSClient against a live server, with the error
paths (401, 403, 404, 400 with fields, 409). Each scenario runs with both clients."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from rms_client import RMSError

from feedback.models import FeedbackSession
from rms.models import MemoryObject
from tests.client.conftest import alist, aw, run

pytestmark = pytest.mark.django_db(transaction=True)


def facts(n, **kw):
    return [
        {"namespace": "support", "content": f"Alice prefers tool number {i}",
         "epistemic_type": "ASSERTED", **kw}
        for i in range(n)
    ]  # fmt: skip


async def raises(call, status, code=None):
    """``call()`` (a sync call raises at once, an async one when awaited) raises RMSError."""
    try:
        await aw(call())
    except RMSError as err:
        assert err.status == status, err
        if code is not None:
            assert err.code == code, err
        return err
    raise AssertionError(f"expected RMSError {status}")


def test_objects_signals_and_their_errors(env, flavour):
    async def scenario(c):
        obj = await aw(
            c.create_object(namespace="support", content="Alice prefers Python",
                            epistemic_type="ASSERTED", domain_tags=["alice"])
        )  # fmt: skip
        assert obj["namespace"] == "support" and obj["domain_tags"] == ["alice"]
        uuid.UUID(obj["id"])  # chosen by the client
        got = await aw(c.get_object(obj["id"]))
        assert got["id"] == obj["id"] and got["content"] == "Alice prefers Python"
        many = await aw(c.create_objects(facts(3)))
        assert [o["content"] for o in many] == [f"Alice prefers tool number {i}" for i in range(3)]
        listed = await alist(c.list_objects("support", page_size=2))  # two pages and one
        assert len(listed) == 4 and len({o["id"] for o in listed}) == 4

        answer = await aw(
            c.signal(obj["id"], "CONFIRMED", session_id="s-1", actor_id="u-9",
                     actor_type="HUMAN_USER")
        )  # fmt: skip
        assert answer["effect"] == "reinforced"
        assert answer["object"]["confidence"] > obj["confidence"]
        assert answer["operation"]["op_type"] == "REINFORCE"
        ops = await alist(c.object_operations(obj["id"], page_size=1))
        assert [op["op_type"] for op in ops] == ["OBJECT_CREATED", "FEEDBACK_EVENT", "REINFORCE"]
        state = await aw(c.object_state(obj["id"], datetime.now(UTC) + timedelta(seconds=1)))
        assert state["confidence"] == answer["object"]["confidence"]

        # 400 with fields, 404 (unknown and malformed ids), 403 (another namespace)
        err = await raises(
            lambda: c.create_object(namespace="support", content="x", epistemic_type="NOPE"),
            400,
            "validation_error",
        )
        assert "epistemic_type" in err.fields
        await raises(lambda: c.get_object(str(uuid.uuid4())), 404, "not_found")
        await raises(lambda: c.get_object("not-a-uuid"), 404)
        await raises(
            lambda: c.create_object(namespace="billing", content="x", epistemic_type="ASSERTED"),
            403,
        )
        key = str(uuid.uuid4())  # a signal's request_id is a UUID (API.md)
        first = await aw(c.signal(obj["id"], "REFERENCED", session_id="s-2", request_id=key))
        again = await aw(c.signal(obj["id"], "REFERENCED", session_id="s-2", request_id=key))
        assert again["operation"]["id"] == first["operation"]["id"]
        err = await raises(
            lambda: c.signal(obj["id"], "CORRECTED", session_id="s-2", request_id=key), 409
        )
        assert err.message
        return obj["id"]

    oid = run(flavour, env.url, env.client, scenario)
    assert MemoryObject.objects.count() == 4
    assert MemoryObject.objects.get(pk=oid).reinforcement_count >= 1


def test_admin_object_changes_and_their_errors(env, flavour):
    async def scenario(admin):
        obj = await aw(
            admin.create_object(namespace="support", content="Bob uses vim",
                                epistemic_type="INFERRED")
        )  # fmt: skip
        cond = await aw(
            admin.create_object(namespace="support", content="Deploys on Fridays",
                                epistemic_type="CONDITIONAL")
        )  # fmt: skip
        pinned = await aw(admin.pin(obj["id"], "checked by hand", confidence=0.8))
        assert pinned["pinned"] is True and pinned["confidence"] == 0.8
        assert (await aw(admin.unpin(obj["id"], "no longer")))["pinned"] is False
        moved = await aw(admin.transition(obj["id"], "ASSERTED", "confirmed"))
        assert moved["epistemic_type"] == "ASSERTED"
        await raises(lambda: admin.transition(obj["id"], "HYPOTHETICAL", "back"), 409)
        changed = await aw(admin.set_condition(cond["id"], "TRUE"))
        assert changed["condition_state"] == "TRUE"
        await raises(lambda: admin.set_condition(obj["id"], "TRUE"), 409)
        ns = await aw(admin.create_namespace("travel", ignore_threshold=7))
        assert ns["name"] == "travel" and ns["ignore_threshold"] == 7
        await raises(lambda: admin.create_namespace("travel"), 409)
        names = {n["name"] for n in await aw(admin.list_namespaces())}
        assert {"support", "billing", "travel"} <= names
        assert (await aw(admin.get_namespace("travel")))["ignore_threshold"] == 7
        health = await aw(admin.health())
        assert health["status"] == "ok" and health["database"] == "ok"
        return obj["id"]

    run(flavour, env.url, env.admin, scenario)

    async def not_admin(c):
        objects = await alist(c.list_objects("support"))
        await raises(lambda: c.pin(objects[0]["id"], "mine"), 403, "forbidden")
        await raises(lambda: c.get_namespace("travel"), 404)

    run(flavour, env.url, env.client, not_admin)


def test_authentication_errors_are_401(env, flavour):
    async def bad_token(c):
        err = await raises(lambda: c.get_object(str(uuid.uuid4())), 401)
        assert err.code in ("authentication_failed", "not_authenticated")

    run(flavour, env.url, "not-a-token", bad_token)

    async def no_token(c):
        await raises(lambda: c.metrics("support"), 401, "not_authenticated")
        assert (await aw(c.health()))["status"] == "ok"  # health needs no token

    run(flavour, env.url, None, no_token)


def session_body(ids, request_id, **kw):
    return {
        "session_id": f"conv-{request_id}",
        "request_id": request_id,
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 300,
        "context_text": "what does Alice prefer",
        "injections": [
            {"object_id": oid, "rank_position": i + 1, "token_cost": 100}
            for i, oid in enumerate(ids)
        ],
        **kw,
    }


def test_sessions_batch_metrics_and_reads(env, flavour):
    async def scenario(c):
        objs = await aw(c.create_objects(facts(3)))
        ids = [o["id"] for o in objs]
        body = session_body(
            ids, "one",
            signals=[{"object_id": ids[0], "signal_type": "CONFIRMED",
                      "actor_type": "HUMAN_USER"}],
        )  # fmt: skip
        record = await aw(c.record_session(body))
        assert record["request_id"] == "one" and record["injected_object_ids"] == ids
        assert sorted(record["unused_ids"]) == sorted(ids[1:])
        same = await aw(c.record_session(body))  # an identical retry: the stored record
        assert same["id"] == record["id"]
        err = await raises(lambda: c.record_session({**body, "tokens_used": 301}), 409)
        assert err.code
        no_id = await aw(c.record_session({k: v for k, v in body.items() if k != "request_id"}))
        assert no_id["request_id"] != "one"  # the client added one
        assert (await aw(c.get_session(record["id"])))["id"] == record["id"]
        await raises(lambda: c.get_session(str(uuid.uuid4())), 404)

        bad = session_body([str(uuid.uuid4())], "bad")
        items = await aw(
            c.record_sessions([session_body(ids, f"b-{i}") for i in range(3)] + [bad, body])
        )
        assert [i["status"] for i in items] == [201, 201, 201, 400, 200]
        assert "injections.0.object_id" in items[3]["error"]["fields"]
        err = await raises(lambda: c.record_session(bad), 400, "validation_error")
        assert "injections.0.object_id" in err.fields

        metrics = await aw(c.metrics("support"))
        assert metrics["namespace"] == "support"
        assert set(metrics["metrics"]) == {
            "mean_usage_ratio", "high_correction_rate", "budget_waste_ratio",
            "unused_injection_rate",
        }  # fmt: skip
        # SPEC §10: ids[1] and ids[2] were never used (usage ratio 0 < 0.05): 5 sessions x 2
        # x 100 tokens of waste over 5 x 1000 of budget
        assert metrics["metrics"]["budget_waste_ratio"]["value"] == pytest.approx(0.2)
        await raises(lambda: c.metrics("billing"), 403)
        await raises(lambda: c.metrics("support", since="yesterday"), 400)

        ranked = await aw(c.rank("support", [(ids[0], 0.9), (ids[1], 0.1)]))
        assert [r["object_id"] for r in ranked] == [ids[0], ids[1]]
        assert ranked[0]["score"] > ranked[1]["score"]
        found = await aw(c.detect("Alice prefers tool number 0 for this.", [ids[0], ids[2]]))
        assert {r["object_id"]: r["signal_type"] for r in found}[ids[0]] == "REFERENCED"
        err = await raises(lambda: c.detect("text", ["nope"]), 400)
        assert "object_ids" in " ".join(err.fields)
        csv_text = await aw(c.export_csv("sessions", "support"))
        assert csv_text.splitlines()[0].startswith("id,session_id,request_id")
        assert len(csv_text.splitlines()) == 1 + 5
        await raises(lambda: c.review_queue("support"), 403)  # operators only
        return ids

    ids = run(flavour, env.url, env.client, scenario)
    assert FeedbackSession.objects.count() == 5

    async def operator(c):
        queue = await aw(c.review_queue("support"))
        assert isinstance(queue, list)
        assert all("aggregate" in item for item in queue)
        await raises(lambda: c.record_session(session_body(ids, "op")), 403)

    run(flavour, env.url, env.operator, operator)


async def asyncio_sleep(seconds):
    await asyncio.sleep(seconds)


def test_relationships_and_graph(env, flavour):
    async def scenario(c):
        a, b = await aw(c.create_objects(facts(2)))
        rel = await aw(c.create_relationship(a["id"], b["id"], "supports", "INFERRED"))
        assert rel["source"] == a["id"] and rel["alpha"] > 0
        await raises(lambda: c.create_relationship(a["id"], b["id"], "supports", "INFERRED"), 409)
        err = await raises(lambda: c.create_relationship(a["id"], b["id"], "x", "nowhere"), 400)
        assert "extraction_context" in err.fields
        await aw(asyncio_sleep(0.05))
        after = await aw(c.add_evidence(rel["id"], "corroborate", provenance="user"))
        assert after["mean"] > rel["mean"]
        await raises(
            lambda: c.get_relationship(rel["id"], as_of=datetime.now(UTC) - timedelta(days=1)),
            404,
        )  # it did not exist then
        before = await aw(c.get_relationship(rel["id"], as_of=rel["created_at"]))
        assert before["mean"] == pytest.approx(rel["mean"]) and before["corroborations"] == 0
        assert (await aw(c.get_relationship(rel["id"])))["id"] == rel["id"]
        await raises(lambda: c.get_relationship(str(uuid.uuid4())), 404)
        assert [r["id"] for r in await aw(c.object_relationships(a["id"]))] == [rel["id"]]
        expanded = await aw(c.expand_graph({a["id"]: 1.0}))
        assert [r["object_id"] for r in expanded] == [b["id"]]
        assert expanded[0]["path"] == [rel["id"]]
        # the hundred seeds the contract allows
        others = await aw(c.create_objects(facts(99)))
        many = await aw(c.expand_graph({a["id"]: 1.0} | {o["id"]: 0.5 for o in others}))
        assert [r["object_id"] for r in many] == [b["id"]]
        assert isinstance(await aw(c.calibration("support")), list)

    run(flavour, env.url, env.client, scenario)


def test_tasks(env, flavour):
    async def scenario(c):
        task = await aw(c.start_task("verify_chain"))
        assert task["kind"] == "verify_chain" and task["state"] == "queued"
        assert (await aw(c.get_task(task["id"])))["id"] == task["id"]
        assert [t["id"] for t in await aw(c.list_tasks(kind="verify_chain"))] == [task["id"]]
        err = await raises(lambda: c.start_task("nightly_backup"), 400)
        assert "kind" in err.fields
        await raises(lambda: c.start_task("rebuild_aggregates"), 403)  # admin only
        await raises(lambda: c.get_task(str(uuid.uuid4())), 404)
        # no worker runs in the tests: waiting ends in a clear error, not a hang
        err = await raises(
            lambda: c.wait_task(task["id"], timeout=0.2, poll=0.05), None, "task_timeout"
        )
        assert "queued" in err.message

    run(flavour, env.url, env.operator, scenario)

    async def client_may_not(c):
        await raises(lambda: c.start_task("verify_chain"), 403)

    run(flavour, env.url, env.client, client_may_not)
