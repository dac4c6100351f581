"""rms.bulk writes exactly what Django would: every path (small statement, COPY, temp table,
pipelined batch) reads back the same values, floats bit for bit."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import IntegrityError, connection, transaction

from feedback.models import FeedbackAggregate
from rms import bulk, services
from rms.models import GENESIS_HASH, ApiClient, MemoryObject, SessionTally
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


def objects(n: int) -> list[MemoryObject]:
    client = ApiClient.objects.first() or make_client("bulk", "admin", ["bulk"])[0]
    items = [
        {"namespace": "bulk", "content": f"fact {i}", "epistemic_type": "ASSERTED"}
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


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, bulk.SMALL, bulk.SMALL + 1, 300])
def test_insert_and_update_read_back_exactly(n):
    objs = objects(n)
    first = aggregate_rows(objs, 0)
    bulk.insert(FeedbackAggregate, first)
    assert stored(objs) == expected(first)
    second = aggregate_rows(objs, 7)
    bulk.update(FeedbackAggregate, second, FIELDS)
    assert stored(objs) == expected(second)


@pytest.mark.django_db
def test_batched_runs_small_and_large_writes_in_issue_order():
    objs = objects(bulk.SMALL + 5)
    rows = aggregate_rows(objs, 0)
    with transaction.atomic(), bulk.batched():
        bulk.insert(FeedbackAggregate, rows[:3])  # queued
        bulk.insert(FeedbackAggregate, rows[3:])  # COPY: sends the queue first
        changed = aggregate_rows(objs[:2], 5)
        bulk.update(FeedbackAggregate, changed, FIELDS)  # queued, sent at the end
        bulk.insert(SessionTally, [SessionTally(object_id=objs[0].pk, session_id="s")])
    assert stored(objs) == {**expected(rows), **expected(changed)}
    assert SessionTally.objects.get().object_id == objs[0].pk


@pytest.mark.django_db(transaction=True)
def test_a_failing_statement_in_a_batch_is_an_integrity_error_and_nothing_stays():
    objs = objects(2)
    rows = aggregate_rows(objs, 0)
    with pytest.raises(IntegrityError), transaction.atomic(), bulk.batched():
        bulk.insert(FeedbackAggregate, rows[:1])
        bulk.insert(FeedbackAggregate, rows)  # the first row again: duplicate key
    assert not FeedbackAggregate.objects.exists()


@pytest.mark.django_db
def test_a_batch_whose_block_raises_sends_nothing():
    objs = objects(1)
    with pytest.raises(RuntimeError), bulk.batched():
        bulk.insert(FeedbackAggregate, aggregate_rows(objs, 0))
        raise RuntimeError("the caller's transaction is being rolled back")
    if connection.vendor == "postgresql":
        assert not FeedbackAggregate.objects.exists()


@pytest.mark.django_db
def test_uuid_and_json_columns_round_trip_through_the_small_path():
    from rms.models import Operation, new_row

    obj = objects(1)[0]
    op_id = uuid.uuid4()
    payload = {"text": "quote ' and \" and \\ and ünïcode", "n": 0.1 + 0.2, "none": None}
    op = new_row(
        Operation,
        seq=None,
        id=op_id,
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
        state={"confidence": 1 / 3},
        prev_hash=GENESIS_HASH,
        hash="h",
    )
    bulk.insert(Operation, [op])
    back = Operation.objects.get(id=op_id)
    assert back.payload == payload
    assert back.state == {"confidence": 1 / 3}
    assert back.session_id is None
    assert back.ts == op.ts


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, bulk.SMALL + 1, 300])
def test_pipelined_writes_of_any_size_read_back_exactly(n):
    """Inside pipelined() every write is an array statement sent at once; a read in the block
    waits for them; a float column holding an int is sent as floats."""
    objs = objects(n)
    first = aggregate_rows(objs, 0)
    first[0].lifetime_gamma_applied = 1  # an int among floats: one array holds one type
    with transaction.atomic(), bulk.pipelined():
        assert bulk.pipelining() == (connection.vendor == "postgresql")
        bulk.insert(FeedbackAggregate, first)
        assert stored(objs) == expected(first)
        second = aggregate_rows(objs, 7)
        bulk.update(FeedbackAggregate, second, FIELDS)
    assert not bulk.pipelining()
    assert stored(objs) == expected(second)
    assert isinstance(FeedbackAggregate.objects.get(object=objs[0]).lifetime_gamma_applied, float)


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_in_a_pipeline_fails_the_block_and_leaves_nothing():
    objs = objects(bulk.SMALL + 2)
    rows = aggregate_rows(objs, 0)
    with pytest.raises(IntegrityError), transaction.atomic(), bulk.pipelined():
        bulk.insert(FeedbackAggregate, rows)
        bulk.insert(FeedbackAggregate, rows[:1])  # the first row again: duplicate key
    assert not FeedbackAggregate.objects.exists()
