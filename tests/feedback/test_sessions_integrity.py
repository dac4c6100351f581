"""Feedback sessions: bad input writes nothing, idempotency, batches, rebuild from the log."""

from __future__ import annotations

import json
import random
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from feedback import aggregates, ingest, rebuild
from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent, SignalRecord
from rms.models import Operation
from tests.factories import make_object, make_objects, post, session

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def counts():
    return (
        Operation.objects.count(),
        FeedbackSession.objects.count(),
        InjectionEvent.objects.count(),
        SignalRecord.objects.count(),
        FeedbackAggregate.objects.count(),
    )


@pytest.mark.django_db
class TestBadInput:
    @pytest.fixture
    def ids(self, client_api):
        return make_objects(client_api, 2)

    @pytest.mark.parametrize(
        ("mutate", "status", "field"),
        [
            (
                lambda b, ids: b["injections"].append(
                    {"object_id": str(uuid.uuid4()), "token_cost": 5}
                ),
                400,
                "injections.1.object_id",
            ),
            (
                lambda b, ids: b["signals"].append(
                    {"object_id": str(uuid.uuid4()), "signal_type": "CONFIRMED"}
                ),
                400,
                "signals.0.object_id",
            ),
            (
                lambda b, ids: b["injections"][0].update(token_cost=-1),
                400,
                "injections.0.token_cost",
            ),
            (
                lambda b, ids: b["injections"][0].update(token_cost=0),
                400,
                "injections.0.token_cost",
            ),
            (
                lambda b, ids: b["injections"][0].update(token_cost=1.5),
                400,
                "injections.0.token_cost",
            ),
            (lambda b, ids: b.update(context_budget=-5), 400, "context_budget"),
            (lambda b, ids: b.update(outcome="GREAT"), 400, "outcome"),
            (
                lambda b, ids: b["signals"].append({"object_id": ids[0], "signal_type": "LIKED"}),
                400,
                "signals.0.signal_type",
            ),
            (
                lambda b, ids: b["signals"].append(
                    {"object_id": ids[0], "signal_type": "IGNORED_REPEATEDLY"}
                ),
                400,
                "signals.0.signal_type",
            ),
            (
                lambda b, ids: b["signals"].append(
                    {
                        "object_id": ids[0],
                        "signal_type": "CONFIRMED",
                        "detection_method": "injection_tracking",
                    }
                ),
                400,
                "signals.0.detection_method",
            ),
            (
                lambda b, ids: b["injections"].append({"object_id": ids[0], "token_cost": 5}),
                400,
                "injections.1.object_id",
            ),
            (
                lambda b, ids: b["signals"].extend(
                    [{"object_id": ids[0], "signal_type": "UNUSED"}] * 2
                ),
                400,
                "signals.1.signal_type",
            ),
            (
                lambda b, ids: b["injections"][0].update(composite_score="NaN"),
                400,
                "injections.0.composite_score",
            ),
            (lambda b, ids: b.update(ts="2999-01-01T00:00:00Z"), 400, "ts"),
            (lambda b, ids: b.update(namespace_scope=[]), 400, "namespace_scope"),
            (lambda b, ids: b.pop("request_id"), 400, "request_id"),
            (lambda b, ids: b.update(surprise=True), 400, "surprise"),
        ],
    )
    def test_rejected_and_nothing_written(self, client_api, ids, mutate, status, field):
        body = session("bad", [(ids[0], 10)])
        mutate(body, ids)
        before = counts()
        r = post(client_api, body)
        assert r.status_code == status, r.content
        assert field in r.json()["error"]["fields"]
        assert counts() == before

    def test_object_outside_scope_is_400(self, client_api, outsider_api, ids):
        foreign = outsider_api.post(
            "/api/v1/objects",
            {"namespace": "billing", "content": "x", "epistemic_type": "ASSERTED"},
            format="json",
        ).json()["id"]
        before = counts()
        r = post(client_api, session("scope", [(ids[0], 10), (foreign, 10)]))
        assert r.status_code == 400 and "injections.1.object_id" in r.json()["error"]["fields"]
        assert counts() == before

    def test_foreign_namespace_scope_is_403(self, client_api, other_namespace, ids):
        r = post(client_api, {**session("fs", []), "namespace_scope": ["billing"]})
        assert r.status_code == 403

    def test_unknown_namespace_is_400_for_an_admin(self, admin_api, ids):
        before = counts()
        r = post(admin_api, {**session("gh", [(ids[0], 10)]), "namespace_scope": ["ghost"]})
        assert r.status_code == 400 and "namespace_scope" in r.json()["error"]["fields"]
        assert counts() == before

    def test_session_going_back_in_time_is_409(self, client_api, ids):
        assert post(client_api, session("t1", [(ids[0], 10)], hours=5)).status_code == 201
        before = counts()
        r = post(client_api, session("t2", [(ids[1], 10), (ids[0], 10)], hours=4))
        assert r.status_code == 409 and r.json()["error"]["code"] == "ts_out_of_order"
        assert counts() == before

    def test_operator_may_not_post(self, operator_api, ids):
        assert post(operator_api, session("op", [(ids[0], 10)])).status_code == 403

    @pytest.mark.parametrize(
        "path",
        ["session_id", "outcome", "signals.0.signal_type", "injections.0.representation_type"],
    )
    def test_a_lone_surrogate_is_a_400_on_both_endpoints(self, client_api, ids, path):
        """JSON may spell a lone surrogate ("\\ud800"); no UTF-8 column or answer can hold one.
        It is refused, and an error echoing it still renders (ASCII JSON)."""
        body = session("sur", [(ids[0], 10)], [(ids[0], "CONFIRMED")])
        *parents, last = path.split(".")
        target = body
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[last] = "\ud800x"
        before = counts()
        raw = json.dumps(body)  # ensure_ascii: the surrogate travels as \ud800
        one = client_api.post("/api/v1/feedback-sessions", raw, content_type="application/json")
        assert one.status_code == 400
        assert path in one.json()["error"]["fields"]
        many = client_api.post(
            "/api/v1/feedback-sessions/batch", f"[{raw}]", content_type="application/json"
        )
        assert many.status_code == 207 and many.json()["results"][0]["status"] == 400
        assert counts() == before


@pytest.mark.django_db
class TestIdempotency:
    def test_identical_retry_and_changed_body(self, client_api):
        (a,) = make_objects(client_api, 1)
        body = session("same", [(a, 10)], [(a, "CONFIRMED")])
        first = post(client_api, body)
        before = counts()
        again = post(client_api, body)
        assert (first.status_code, again.status_code) == (201, 200)
        assert again.json() == first.json() and counts() == before
        changed = post(client_api, {**body, "tokens_used": 101})
        assert (
            changed.status_code == 409 and changed.json()["error"]["code"] == "idempotency_mismatch"
        )
        assert counts() == before

    def test_key_reused_on_another_object_is_409_single_and_batch(self, client_api):
        a, b = make_objects(client_api, 2)
        assert post(client_api, session("k1", [(a, 10)], [(a, "CONFIRMED")])).status_code == 201
        before = counts()
        other = session("k1", [(b, 10)], [(b, "CONFIRMED")])
        r = post(client_api, other)
        assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_mismatch"
        r = client_api.post("/api/v1/feedback-sessions/batch", [other], format="json")
        assert [x["status"] for x in r.json()["results"]] == [409]
        assert r.json()["results"][0]["error"]["code"] == "idempotency_mismatch"
        assert counts() == before

    def test_same_key_for_another_client_is_independent(self, client_api, admin_api):
        (a,) = make_objects(client_api, 1)
        body = session("shared", [(a, 10)])
        assert post(client_api, body).status_code == 201
        assert post(admin_api, body).status_code == 201

    def test_batch(self, client_api):
        a, b = make_objects(client_api, 2)
        ok = session("b1", [(a, 10)])
        posted = post(client_api, ok).json()
        items = [
            ok,  # retry of a stored one → 200
            session("b2", [(a, 10)], [(a, "REFERENCED")], hours=2),
            {**session("b3", [(b, 10)]), "context_budget": -1},  # invalid → 400
            session("b2", [(a, 10)], [(a, "REFERENCED")], hours=2),  # duplicate in batch → 200
            {**session("b2", [(b, 10)]), "tokens_used": 7},  # same key, other body → 409
            session("b4", [(b, 10)], hours=3),
            session("b5", [(a, 10)], hours=1),  # a is at hours=2 now → 409
        ]
        r = client_api.post("/api/v1/feedback-sessions/batch", items, format="json")
        assert r.status_code == 207
        res = r.json()["results"]
        assert [x["status"] for x in res] == [200, 201, 400, 200, 409, 201, 409]
        assert res[0]["record"] == posted
        assert res[3]["record"] == res[1]["record"]
        stored = client_api.get(f"/api/v1/feedback-sessions/{res[1]['record']['id']}").json()
        assert stored == res[1]["record"]
        assert res[2]["error"]["code"] == "validation_error"
        assert res[6]["error"]["code"] == "ts_out_of_order"
        assert FeedbackSession.objects.count() == 3

    def test_batch_limits(self, client_api):
        assert (
            client_api.post("/api/v1/feedback-sessions/batch", [], format="json").status_code == 400
        )
        big = [session(f"x{i}", []) for i in range(501)]
        assert (
            client_api.post("/api/v1/feedback-sessions/batch", big, format="json").status_code
            == 400
        )
        assert (
            client_api.post("/api/v1/feedback-sessions/batch", {"a": 1}, format="json").status_code
            == 400
        )

    def test_batch_queries_do_not_grow_per_session(self, client_api):
        """No per-session queries: only bulk statements (which SQLite splits by its parameter
        limit, so rows, not sessions, add a few)."""
        from django.test.utils import CaptureQueriesContext

        ids = make_objects(client_api, 20)

        def run(n: int, tag: str) -> int:
            bodies = [
                session(
                    f"{tag}{i}",
                    [(oid, 10) for oid in ids[i % 10 : i % 10 + 5]],
                    [(ids[i % 10], "REFERENCED")],
                    outcome="SUCCESS",
                    hours=1,
                )
                for i in range(n)
            ]
            with CaptureQueriesContext(connection) as ctx:
                r = client_api.post("/api/v1/feedback-sessions/batch", bodies, format="json")
            assert {x["status"] for x in r.json()["results"]} == {201}
            return len(ctx.captured_queries)

        small, large = run(10, "s"), run(100, "l")
        assert large < 60 and large < small * 3, (small, large)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_store_one_session(require_postgres, client_api):
    ids = make_objects(client_api, 3)
    body = session("race", [(i, 10) for i in ids], [(ids[0], "CONFIRMED")])
    client = client_api.row
    results, errors = [], []
    barrier = threading.Barrier(6)

    def worker():
        try:
            item = ingest.Item(ingest_data(body), "h")
            barrier.wait()
            results.append(ingest.record_sessions(client=client, items=[item])[0][0])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results) == [200] * 5 + [201]
    assert FeedbackSession.objects.filter(request_id="race").count() == 1
    assert InjectionEvent.objects.count() == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_sessions_on_the_same_objects_lose_no_update(require_postgres, client_api):
    """Six writers, five sessions each, all on the same two objects: every injection, signal and
    token is counted once, and the aggregates still equal their rebuild from the log."""
    ids = make_objects(client_api, 2)
    client = client_api.row
    threads_n, per_thread = 6, 5
    errors, statuses = [], []
    barrier = threading.Barrier(threads_n)

    def worker(k):
        try:
            barrier.wait()
            for j in range(per_thread):
                body = session(f"c{k}-{j}", [(ids[0], 10), (ids[1], 7)], [(ids[0], "REFERENCED")])
                item = ingest.Item(ingest_data(body), f"h{k}-{j}")
                statuses.append(ingest.record_sessions(client=client, items=[item])[0][0])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = threads_n * per_thread
    assert statuses == [201] * total
    used = FeedbackAggregate.objects.get(object_id=ids[0])
    unused = FeedbackAggregate.objects.get(object_id=ids[1])
    assert (used.total_injections, used.total_referenced, used.total_token_cost) == (
        total,
        total,
        10 * total,
    )
    assert (unused.total_injections, unused.total_unused, unused.unused_sessions) == (
        total,
        total,
        total,
    )
    assert unused.total_token_cost == 7 * total
    rebuilt = rebuild.fold_log()
    for row in (used, unused):
        live = {f: getattr(row, f) for f in aggregates.FIELDS}
        assert rebuilt[row.object_id].as_dict() | {"usage_ratio": None} == live | {
            "usage_ratio": None
        }


def ingest_data(body: dict) -> dict:
    from feedback.api.serializers import SessionIn

    ser = SessionIn(data=body)
    ser.is_valid(raise_exception=True)
    return dict(ser.validated_data)


@pytest.mark.django_db
def test_rebuild_from_log_equals_live_after_1000_random_sessions(admin_api):
    client = admin_api.row
    rng = random.Random(3)
    objs = [
        make_object(
            client,
            content=f"o{i}",
            ts=T0,
            epistemic_type=rng.choice(["OBSERVED", "ASSERTED", "INFERRED", "CONDITIONAL"]),
        )
        for i in range(60)
    ]
    ids = [str(o.pk) for o in objs]
    kinds = [
        "REFERENCED",
        "CONFIRMED",
        "TASK_COMPLETED_WITH",
        "CORRECTED",
        "UNUSED",
        "CONTRADICTED_BY_OBSERVATION",
        "TASK_FAILED_WITH",
        "CORROBORATED_BY_EXTERNAL",
    ]
    minute = 0
    for _batch in range(10):
        items = []
        for _ in range(100):
            minute += 1
            injected = rng.sample(ids, rng.randint(0, 8))
            signals = []
            for oid in rng.sample(ids, rng.randint(0, 4)):
                kind = rng.choice(kinds)
                if kind == "UNUSED" and any(s[0] == oid and s[1] == "UNUSED" for s in signals):
                    continue
                signals.append(
                    (
                        oid,
                        kind,
                        {
                            "actor_id": f"a{rng.randint(0, 2)}",
                            "actor_type": rng.choice(["AI_AGENT", "HUMAN_USER"]),
                        },
                    )
                )
            body = session(
                f"rb{minute}",
                [(oid, rng.randint(1, 200)) for oid in injected],
                signals,
                outcome=rng.choice([None, "SUCCESS", "PARTIAL", "FAILED"]),
                session_id=f"conv-{rng.randint(0, 30)}",
                hours=0,
                context_budget=rng.randint(0, 5000),
            )
            body["ts"] = (T0 + timedelta(minutes=minute)).isoformat()
            items.append(ingest.Item(ingest_data(body), f"h{minute}"))
        statuses = [s for s, _ in ingest.record_sessions(client=client, items=items)]
        assert statuses == [201] * 100
        # single signals between batches also count (SPEC §8: totals count every signal)
        from feedback import services

        for oid in rng.sample(ids, 5):
            minute += 1
            services.signal_record(
                client=client,
                object_id=uuid.UUID(oid),
                data={
                    "signal_type": rng.choice(kinds),
                    "session_id": "solo",
                    "ts": T0 + timedelta(minutes=minute),
                },
                body_hash="-",
            )
    assert FeedbackSession.objects.count() == 1000
    folded = rebuild.fold_log()
    live = {a.object_id: a for a in FeedbackAggregate.objects.all()}
    assert set(folded) == set(live)
    for object_id, agg in folded.items():
        row = live[object_id]
        for f in aggregates.FIELDS:
            assert getattr(row, f) == getattr(agg, f), (object_id, f)
        assert row.usage_ratio == agg.usage_ratio
    assert rebuild.rebuild_aggregates() == {"objects": len(live), "changed": 0}


@pytest.mark.django_db
def test_a_batch_ends_as_its_sessions_posted_one_by_one(client_api, monkeypatch):
    """A batch sends its event rows every SEND_EVERY sessions (pipelined on PostgreSQL) and
    writes objects, tallies and aggregates once at its end; the end state must be the one the
    same sessions give through the single endpoint, object by object."""
    from rms.models import MemoryObject, SessionTally

    monkeypatch.setattr(ingest, "SEND_EVERY", 7)
    batched, single = make_objects(client_api, 12), make_objects(client_api, 12)
    rng = random.Random(5)
    plans = []
    for k in range(40):
        picks = rng.sample(range(12), 3)
        kinds = [rng.choice(["CONFIRMED", "REFERENCED", "CORRECTED", None]) for _ in picks]
        plans.append((k, picks, kinds, rng.choice(["SUCCESS", "FAILED", None])))

    def bodies(ids, tag):
        return [
            session(
                f"{tag}{k}",
                [(ids[i], 10 + i) for i in picks],
                [(ids[i], kind) for i, kind in zip(picks, kinds, strict=True) if kind],
                outcome=outcome,
                hours=1 + k,
                session_id=f"conv-{k % 4}",  # conversations span sessions: tallies carry over
            )
            for k, picks, kinds, outcome in plans
        ]

    r = client_api.post("/api/v1/feedback-sessions/batch", bodies(batched, "b"), format="json")
    assert {x["status"] for x in r.json()["results"]} == {201}
    for body in bodies(single, "s"):
        assert post(client_api, body).status_code == 201

    fields = ["confidence", "salience_base", "reinforcement_count", "version", "last_op_ts"]
    for left, right in zip(batched, single, strict=True):
        one, two = (MemoryObject.objects.get(pk=pk) for pk in (left, right))
        assert [getattr(one, f) for f in fields] == [getattr(two, f) for f in fields]
        agg_one, agg_two = (FeedbackAggregate.objects.get(object_id=pk) for pk in (left, right))
        assert [getattr(agg_one, f) for f in aggregates.FIELDS] == [
            getattr(agg_two, f) for f in aggregates.FIELDS
        ]
        tallies = [
            sorted(
                SessionTally.objects.filter(object_id=pk).values_list(
                    "session_id", "gamma_total", "repeats"
                )
            )
            for pk in (left, right)
        ]
        assert tallies[0] == tallies[1]


@pytest.mark.django_db
def test_rebuild_repairs_a_damaged_aggregate(client_api):
    (a,) = make_objects(client_api, 1)
    post(client_api, session("d1", [(a, 10)], [(a, "CONFIRMED")], outcome="SUCCESS"))
    FeedbackAggregate.objects.filter(object_id=a).update(total_injections=99, utility=0.1)
    assert rebuild.rebuild_aggregates()["changed"] == 1
    row = FeedbackAggregate.objects.get(object_id=a)
    assert (row.total_injections, row.utility, row.usage_ratio) == (1, 0.55, 1.0)
