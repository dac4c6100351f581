"""One contract for both stores (``rms.store``): what the PostgreSQL store and the portable one
read and write is exactly what Django would. Every test runs against each store the database
allows (both on PostgreSQL, the portable one elsewhere), through every write path (small
statement, COPY, temp table, pipelined batch): values read back the same, floats bit for bit."""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import ClassVar

import pytest
from django.db import IntegrityError, connection, connections, transaction

from feedback.models import FeedbackAggregate
from rms import events, services, store
from rms.models import GENESIS_HASH, ApiClient, MemoryObject, Namespace, Operation, SessionTally
from rms.oplog import canonical_json
from rms.store.pg import SMALL
from tests.factories import make_client

KOLKATA = timezone(timedelta(hours=5, minutes=30))  # sent as its UTC instant
FLOATS = [0.1 + 0.2, 1e-300, 5e-324, 1 / 3, 0.9999999999999999, 123456.789e10]
FIELDS = [
    "total_injections",
    "total_token_cost",
    "usage_ratio",
    "last_positive_signal",
    "lifetime_gamma_applied",
    "unused_streak",
]


@pytest.fixture(params=["portable", "postgres"])
def impl(request) -> store.Store:
    if request.param == "postgres" and connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL store needs PostgreSQL (set DATABASE_URL)")
    return store.postgres_store() if request.param == "postgres" else store.portable_store()


def objects(n: int, namespace: str = "bulk") -> list[MemoryObject]:
    client = ApiClient.objects.first() or make_client("bulk", "admin", [namespace])[0]
    if not Namespace.objects.filter(name=namespace).exists():
        services.namespace_create(name=namespace)
    items = [
        {"namespace": namespace, "content": f"fact {i}", "epistemic_type": "ASSERTED"}
        for i in range(n)
    ]
    return services.object_create(client=client, items=items)


def aggregate_rows(objs, k: int) -> list[FeedbackAggregate]:
    return [
        FeedbackAggregate(
            object_id=obj.pk,
            namespace_id=obj.namespace_id,
            total_injections=i + k,
            total_token_cost=2**40 + i,
            usage_ratio=None if i % 3 == 0 else FLOATS[(i + k) % len(FLOATS)],
            last_positive_signal=None
            if i % 2
            else datetime(2026, 1, 2, 3, 4, 5, 123456 + i, tzinfo=UTC if i % 4 else KOLKATA),
            lifetime_gamma_applied=FLOATS[i % len(FLOATS)] * (k + 1),
            unused_streak=i,
        )
        for i, obj in enumerate(objs)
    ]


def stored(objs) -> dict:
    rows = FeedbackAggregate.objects.filter(object__in=objs).values("object_id", *FIELDS)
    return {r.pop("object_id"): r for r in rows}


def expected(rows) -> dict:
    return {r.object_id: {f: getattr(r, f) for f in FIELDS} for r in rows}


# --- reads ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_select_reads_instances_equal_to_the_orm_s(impl):
    objs = objects(3)
    wanted = [objs[0].pk, objs[2].pk, uuid.uuid4()]  # an unknown id is simply absent
    (found,) = impl.read([store.Select(MemoryObject, where={"id": wanted})])
    orm = {o.pk: o for o in MemoryObject.objects.filter(pk__in=wanted)}
    assert {o.pk for o in found} == {objs[0].pk, objs[2].pk}
    for obj in found:
        for f in MemoryObject._meta.concrete_fields:
            assert getattr(obj, f.attname) == getattr(orm[obj.pk], f.attname), f.attname
        assert obj.created_at.isoformat() == orm[obj.pk].created_at.isoformat()


@pytest.mark.django_db
def test_selects_filter_by_equality_membership_and_pairs_and_read_columns(impl):
    objs = objects(3)
    for i, obj in enumerate(objs):
        for sid in ("s1", "s2"):
            SessionTally.objects.create(object=obj, session_id=sid, gamma_total=i + 0.5)
    namespace = objs[0].namespace
    pairs = [(objs[0].pk, "s1"), (objs[1].pk, "s2"), (objs[2].pk, "missing")]
    by_name, tallies, columns, empty = impl.read(
        [
            store.Select(Namespace, where={"name": {"bulk", "nope"}}),
            store.Select(SessionTally, pairs=(("object_id", "session_id"), pairs)),
            store.Select(
                SessionTally,
                where={"object_id": [objs[2].pk], "session_id": "s2"},
                columns=("object_id", "gamma_total"),
            ),
            store.Select(Namespace, where={"name": []}),
        ]
    )
    assert [ns.pk for ns in by_name] == [namespace.pk]
    # exactly the pairs asked for, not every id with every session id
    assert sorted((t.object_id, t.session_id) for t in tallies) == sorted(pairs[:2])
    assert columns == [(objs[2].pk, 2.5)]
    assert empty == []


@pytest.mark.django_db
def test_json_columns_read_as_columns_are_decoded_like_the_orm_s(impl):
    """A JSON column in ``columns`` comes back as its value (what ``values_list`` gives), not
    as the JSON text PostgreSQL sends."""
    objs = objects(2)
    MemoryObject.objects.filter(pk=objs[0].pk).update(domain_tags=["b", "Ä"])
    (rows,) = impl.read(
        [
            store.Select(
                MemoryObject,
                where={"id": [o.pk for o in objs]},
                columns=("id", "domain_tags", "evidence_ids", "content"),
            )
        ]
    )
    orm = MemoryObject.objects.filter(pk__in=[o.pk for o in objs])
    assert sorted(rows) == sorted(orm.values_list("id", "domain_tags", "evidence_ids", "content"))
    assert dict((r[0], r[1]) for r in rows)[objs[0].pk] == ["b", "Ä"]


@pytest.mark.django_db
def test_key_lookups_change_no_result_and_leave_the_settings_as_they_were(impl):
    objs = objects(3)
    ids = [o.pk for o in objs]
    aggs = aggregate_rows(objs, 0)
    with transaction.atomic():
        before = setting("random_page_cost")
        with impl.key_lookups():
            locked = impl.lock_objects(ids)
            impl.insert(FeedbackAggregate, aggs)
            impl.update(FeedbackAggregate, aggregate_rows(objs, 3), FIELDS)
        assert setting("random_page_cost") == before
    assert list(locked) == sorted(ids)
    assert stored(objs) == expected(aggregate_rows(objs, 3))


@pytest.mark.postgres
@pytest.mark.django_db
def test_key_lookups_price_index_probes_as_cached_pages_on_postgres(require_postgres):
    from rms.store.pg import KEY_LOOKUP_PAGE_COST

    impl = store.postgres_store()
    with transaction.atomic():
        before = setting("random_page_cost")
        with impl.key_lookups():
            assert setting("random_page_cost") == KEY_LOOKUP_PAGE_COST
            with impl.key_lookups():  # nested: joins the outer block
                pass
            assert setting("random_page_cost") == KEY_LOOKUP_PAGE_COST
        assert setting("random_page_cost") == before
    with pytest.raises(RuntimeError), transaction.atomic(), impl.key_lookups():
        raise RuntimeError("rolled back")  # the rollback restores it
    assert setting("random_page_cost") == before


def setting(name: str) -> str | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_locking_select_reads_in_primary_key_order_with_namespaces_attached(impl):
    objs = objects(5)
    namespace = Namespace.objects.get(name="bulk")
    with transaction.atomic():
        locked = impl.lock_objects([o.pk for o in reversed(objs)], namespaces=[namespace])
    assert list(locked) == sorted(o.pk for o in objs)
    assert all(obj.namespace is namespace for obj in locked.values())
    with transaction.atomic():  # a namespace not given is read
        (obj,) = impl.lock_objects([objs[0].pk]).values()
    assert obj.namespace.name == "bulk"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_locking_select_holds_the_rows_until_the_transaction_ends(impl, require_postgres):
    (obj,) = objects(1)
    seen = []

    def other_writer():
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM rms_memoryobject WHERE id = %s FOR UPDATE NOWAIT", [obj.pk]
                )
                seen.append("free")
        except Exception as exc:  # noqa: BLE001 - the lock's refusal is what is asserted
            seen.append(type(exc).__name__)
        finally:
            connections["default"].close()

    with transaction.atomic():
        impl.lock_objects([obj.pk])
        thread = threading.Thread(target=other_writer)
        thread.start()
        thread.join()
    assert seen == ["OperationalError"]


# --- writes ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_newest_per_key_reads_each_key_s_newest_rows_newest_first(impl):
    """Per key, the newest n values as text, by (ts, tie-breaker) descending; ties on ts go to
    the tie-breaker; keys without rows are absent; an empty request reads nothing."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    a, b, none = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    rows = []
    for target, times in ((a, [0, 1, 1, 2, 5]), (b, [3, 3, 4])):
        for i, minutes in enumerate(times):
            rows.append(
                Operation(
                    id=uuid.uuid4(), ts=t0 + timedelta(minutes=minutes), op_type=f"T{minutes}-{i}",
                    target_type="memory_object", target_id=target, namespace="bulk",
                    actor_id="x", actor_type="SYSTEM_PROCESS", payload={}, prev_hash="0" * 64,
                    hash="0" * 64,
                )
            )  # fmt: skip
    Operation.objects.bulk_create(rows)  # seq follows list order: the tie-breaker
    found = impl.newest_per_key(Operation, "target_id", {a: 3, b: 5, none: 2}, "op_type",
                                ("ts", "seq"))  # fmt: skip
    assert found == {a: ["T5-4", "T2-3", "T1-2"], b: ["T4-2", "T3-1", "T3-0"]}
    assert impl.newest_per_key(Operation, "target_id", {}, "op_type", ("ts", "seq")) == {}


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, SMALL, SMALL + 1, 300])
def test_insert_and_update_read_back_exactly(impl, n):
    objs = objects(n)
    first = aggregate_rows(objs, 0)
    impl.insert(FeedbackAggregate, first)
    assert stored(objs) == expected(first)
    second = aggregate_rows(objs, 7)
    impl.update(FeedbackAggregate, second, FIELDS)
    assert stored(objs) == expected(second)


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, SMALL + 1])
def test_update_values_writes_plain_tuples(impl, n):
    objs = objects(n)
    rows = aggregate_rows(objs, 0)
    impl.insert(FeedbackAggregate, rows)
    changed = aggregate_rows(objs, 3)
    impl.update_values(
        FeedbackAggregate,
        FIELDS,
        [(r.object_id, *(getattr(r, f) for f in FIELDS)) for r in changed],
    )
    assert stored(objs) == expected(changed)


@pytest.mark.django_db
def test_batched_runs_small_and_large_writes_in_issue_order(impl):
    objs = objects(SMALL + 5)
    rows = aggregate_rows(objs, 0)
    with transaction.atomic(), impl.batched():
        impl.insert(FeedbackAggregate, rows[:3])  # PostgreSQL: queued
        impl.insert(FeedbackAggregate, rows[3:])  # COPY: sends the queue first
        changed = aggregate_rows(objs[:2], 5)
        impl.update(FeedbackAggregate, changed, FIELDS)  # queued, sent at the end
        impl.insert(SessionTally, [SessionTally(object_id=objs[0].pk, session_id="s")])
    assert stored(objs) == {**expected(rows), **expected(changed)}
    assert SessionTally.objects.get().object_id == objs[0].pk


@pytest.mark.django_db(transaction=True)
def test_a_failing_statement_in_a_batch_is_an_integrity_error_and_nothing_stays(impl):
    objs = objects(2)
    rows = aggregate_rows(objs, 0)
    with pytest.raises(IntegrityError), transaction.atomic(), impl.batched():
        impl.insert(FeedbackAggregate, rows[:1])
        impl.insert(FeedbackAggregate, rows)  # the first row again: duplicate key
    assert not FeedbackAggregate.objects.exists()


@pytest.mark.django_db
def test_a_batch_whose_block_raises_leaves_nothing(impl):
    objs = objects(1)
    with pytest.raises(RuntimeError), transaction.atomic(), impl.batched():
        impl.insert(FeedbackAggregate, aggregate_rows(objs, 0))
        raise RuntimeError("the caller's transaction is being rolled back")
    assert not FeedbackAggregate.objects.exists()


def operation(obj, payload, state) -> dict:
    return dict(
        seq=None,
        id=uuid.uuid4(),
        ts=datetime(2026, 5, 6, 7, 8, 9, 1, tzinfo=UTC),
        op_type="PIN",
        target_type="memory_object",
        target_id=obj.pk,
        namespace="bulk",
        actor_id="a",
        actor_type="USER",
        session_id=None,
        payload=payload,
        policy_version="",
        state=state,
        prev_hash=GENESIS_HASH,
        hash="ab" * 32,  # a digest: the column holds 32 bytes on PostgreSQL
    )


@dataclass
class EncodedOperation:
    """An operation row whose JSON columns carry their encoded text (as ``rms.oplog``'s)."""

    JSON_TEXTS: ClassVar[dict] = {"payload": "payload_json", "state": "state_json"}
    seq: None
    id: uuid.UUID
    ts: datetime
    op_type: str
    target_type: str
    target_id: uuid.UUID
    namespace: str
    actor_id: str
    actor_type: str
    session_id: str | None
    payload: dict
    policy_version: str
    state: dict | None
    prev_hash: str
    hash: str
    payload_json: str = ""
    state_json: str | None = None


PAYLOAD = {"text": "quote ' and \" and \\ and ünïcode", "n": 0.1 + 0.2, "none": None}


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, SMALL + 1])
def test_model_instances_and_encoded_dataclass_rows_round_trip(impl, n):
    obj = objects(1)[0]
    plain = [Operation(**operation(obj, PAYLOAD, {"confidence": 1 / 3})) for _ in range(n)]
    encoded = []
    for _ in range(n):
        values = operation(obj, PAYLOAD, None)
        encoded.append(EncodedOperation(**values, payload_json=canonical_json(PAYLOAD)))
    impl.insert(Operation, plain)
    impl.insert(Operation, encoded)
    for row in plain + encoded:
        back = Operation.objects.get(id=row.id)
        assert back.payload == PAYLOAD
        assert back.state == row.state
        assert back.session_id is None
        assert back.ts == row.ts
    # rows keep their list order: the auto-increment column numbers them in it
    ids = list(Operation.objects.filter(op_type="PIN").order_by("seq").values_list("id", flat=True))
    assert ids == [row.id for row in plain + encoded]


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, SMALL + 1, 300])
def test_pipelined_writes_of_any_size_read_back_exactly(impl, n):
    """Inside pipelined() every write may be sent at once; a read in the block waits for them;
    a float column holding an int is stored as floats."""
    objs = objects(n)
    first = aggregate_rows(objs, 0)
    first[0].lifetime_gamma_applied = 1  # an int among floats: one array holds one type
    with transaction.atomic(), impl.pipelined():
        assert impl.pipelining() == (impl.vendor == "postgresql")
        impl.insert(FeedbackAggregate, first)
        assert stored(objs) == expected(first)
        second = aggregate_rows(objs, 7)
        impl.update(FeedbackAggregate, second, FIELDS)
    assert not impl.pipelining()
    assert stored(objs) == expected(second)
    assert isinstance(FeedbackAggregate.objects.get(object=objs[0]).lifetime_gamma_applied, float)


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_in_a_pipeline_fails_the_block_and_leaves_nothing(impl):
    objs = objects(SMALL + 2)
    rows = aggregate_rows(objs, 0)
    with pytest.raises(IntegrityError), transaction.atomic(), impl.pipelined():
        impl.insert(FeedbackAggregate, rows)
        impl.insert(FeedbackAggregate, rows[:1])  # the first row again: duplicate key
    assert not FeedbackAggregate.objects.exists()


# --- window sums ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_injection_window_sums_count_the_window_and_the_cost_of_wasteful_objects(impl):
    from feedback.models import InjectionEvent

    objs = objects(3) + objects(1, namespace="other")
    start = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        InjectionEvent(
            session_id=uuid.uuid4(), object_id=obj.pk, namespace_id=obj.namespace_id,
            ts=start + timedelta(hours=i), token_cost=10 * (i + 1), rank_position=1,
            ended_unused=bool(i % 2),
        )
        for i, obj in enumerate([*objs, objs[0], objs[1]])
    ]  # fmt: skip
    InjectionEvent.objects.bulk_create(rows)
    ns = {obj.namespace_id for obj in objs}
    wasteful = MemoryObject.objects.filter(pk__in=[objs[0].pk, objs[3].pk]).values("pk")
    window = InjectionEvent.objects.filter(namespace_id__in=ns, ts__gte=start + timedelta(hours=1))
    got = impl.injection_window_sums(window, wasteful)
    bulk, other = objs[0].namespace_id, objs[3].namespace_id
    # Hours 1..5: objs 1, 2, 3 (other), 0, 1 at costs 20, 30, 40, 50, 60; unused at odd hours.
    assert got == {
        bulk: {"namespace_id": bulk, "n": 4, "unused": 2, "wasted": 50},
        other: {"namespace_id": other, "n": 1, "unused": 1, "wasted": 40},
    }
    later = window.filter(ts__gte=start + timedelta(days=9))
    assert impl.injection_window_sums(later, wasteful) == {}


# --- the change feed -----------------------------------------------------------------------------


def reference_events(namespace: str | None = None) -> list[dict]:
    """The change events of the log as ``rms.events.event`` builds them from ORM reads."""
    ops = Operation.objects.filter(op_type__in=events.CHANGE_OPS).order_by("seq")
    if namespace:
        ops = ops.filter(namespace=namespace)
    return [
        {
            k: v
            for k, v in events.event(
                seq=op.seq, txid=0, op_id=op.id, ts=op.ts, op_type=op.op_type,
                target_type=op.target_type, target_id=op.target_id, namespace=op.namespace,
                payload=op.payload, state=op.state,
            ).items()
            if k != "cursor"  # positions differ by store: (txid, seq) or (0, seq)
        }
        for op in ops
    ]  # fmt: skip


def without_cursor(event: dict) -> dict:
    return {k: v for k, v in event.items() if k != "cursor"}


@pytest.mark.django_db(transaction=True)  # the feed releases only committed transactions
def test_change_rows_are_the_committed_change_operations_in_order_filtered_and_bounded(impl):
    objs = objects(3) + objects(2, namespace="other")
    services.object_pin(client=ApiClient.objects.first(), object_id=objs[0].pk, reason="core")
    every = list(events.CHANGE_OPS)
    below = impl.release_bound()
    rows = impl.change_rows(events.START, below=below, limit=100, op_types=every, namespaces=None)
    assert [without_cursor(r.event) for r in rows] == reference_events()
    assert [r.type for r in rows] == [e["type"] for e in reference_events()]
    assert [r.event["cursor"] for r in rows] == [events.encode_cursor(r.position) for r in rows]
    positions = [r.position for r in rows]
    assert positions == sorted(positions) and len(set(positions)) == len(positions) == 6
    assert impl.change_head(below) == positions[-1]

    # After a position, a limit, a namespace filter, an operation filter.
    page = impl.change_rows(positions[1], below=below, limit=2, op_types=every, namespaces=None)
    assert [r.position for r in page] == positions[2:4]
    other = impl.change_rows(
        events.START, below=below, limit=9, op_types=every, namespaces=["other"]
    )
    assert [without_cursor(r.event) for r in other] == reference_events("other")
    pins = impl.change_rows(events.START, below=below, limit=9, op_types=["PIN"], namespaces=None)
    assert [r.type for r in pins] == ["object.pinned"]

    # Nothing at or above the bound is read; JSON texts are the same events.
    assert impl.change_rows(events.START, below=0, limit=9, op_types=every, namespaces=None) == []
    assert impl.change_head(0) is None
    texts = impl.change_rows(
        events.START, below=below, limit=100, op_types=every, namespaces=None, as_json=True
    )
    decoded = [json.loads(r.event) if isinstance(r.event, str) else r.event for r in texts]
    assert decoded == [r.event for r in rows]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_horizon_holds_back_a_transaction_still_running(require_postgres):
    """PostgreSQL: a row of a transaction still running is not released, nor is any row
    committed after that transaction started (a lower ``seq`` may still commit). Serialised
    writers (the portable store's databases) cannot have two writers at once."""
    impl = store.postgres_store()
    first = objects(1)
    started, release = threading.Event(), threading.Event()

    def writer():
        try:
            with transaction.atomic():
                objects(1)
                started.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert started.wait(10)
        objects(1)  # committed while the writer runs: above the horizon as well
        below = impl.release_bound()
        every = list(events.CHANGE_OPS)
        seen = impl.change_rows(events.START, below=below, limit=9, op_types=every, namespaces=None)
        assert [r.event["target_id"] for r in seen] == [str(first[0].pk)]
        assert impl.change_head(below) == seen[0].position
    finally:
        release.set()
        thread.join()
    below = impl.release_bound()
    every = list(events.CHANGE_OPS)
    assert (
        len(impl.change_rows(events.START, below=below, limit=9, op_types=every, namespaces=None))
        == 3
    )


def test_get_picks_the_store_of_the_default_database():
    expected_vendor = "postgresql" if connection.vendor == "postgresql" else "portable"
    assert store.get().vendor == expected_vendor
    assert store.get() is store.get()
