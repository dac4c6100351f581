"""The operation log's hashes as bytes (rms.store.fields.HashField): a log written while they were
hex text migrates in place with every digest unchanged, so its chains still verify; written and
read back through every path (the store's arrays and COPY, the ORM) they are the hex digests the
chain computed; on PostgreSQL each takes 32 bytes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from feedback import services as feedback_services
from rms import store
from rms.models import MemoryObject, Operation
from rms.oplog import operation_hash
from rms.verification import verify_chain_all, verify_object_chain
from tests.factories import make_client, make_namespace, make_object

BEFORE = [("rms", "0009_merge_confidence_index_and_retention")]


def _signal(client, obj, n: int) -> None:
    data = {"signal_type": "CONFIRMED", "session_id": f"s-{n}"}
    feedback_services.signal_record(client=client, object_id=obj.pk, data=data, body_hash="-")


def _migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)


def _stored() -> list[tuple]:
    """(seq, prev_hash, hash) as the database holds them, bytes read as hex."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, prev_hash, hash FROM rms_operation ORDER BY seq")
        rows = cursor.fetchall()
    return [tuple(bytes(v).hex() if isinstance(v, bytes | memoryview) else v for v in r)
            for r in rows]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_a_log_with_text_hashes_migrates_in_place_and_still_verifies():
    make_namespace("support")
    client, _ = make_client("writer", "operator", ["support"])
    obj = make_object(client)
    for n in range(3):
        _signal(client, obj, n)
    written = list(Operation.objects.order_by("seq").values_list("seq", "prev_hash", "hash"))
    assert len(written) >= 4 and all(len(h) == 64 for _, p, h in written for h in (p, h))

    _migrate(BEFORE)
    # Before the migration the column is the hex text, on every database.
    assert _stored() == written
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT max(octet_length(hash)) FROM rms_operation")
            assert cursor.fetchone()[0] == 64

    _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    assert _stored() == written
    assert list(Operation.objects.order_by("seq").values_list("seq", "prev_hash", "hash")) == (
        written
    )
    obj = MemoryObject.objects.get(pk=obj.pk)
    assert verify_object_chain(obj) is None
    assert verify_chain_all()["ok"] is True
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT min(octet_length(hash)), max(octet_length(prev_hash)) "
                           "FROM rms_operation")  # fmt: skip
            assert cursor.fetchone() == (32, 32)


@pytest.mark.django_db
@pytest.mark.parametrize("rows", [2, 300])  # arrays below the store's COPY threshold, COPY above
def test_hashes_written_by_the_store_read_back_as_the_chain_computed(rows):
    make_namespace("support")
    client, _ = make_client("writer", "operator", ["support"])
    obj = make_object(client)
    template = Operation.objects.get(target_id=obj.pk)
    ops = []
    for n in range(rows):
        op = Operation(
            id=None, ts=template.ts, op_type="IGNORED_CHECK", target_type=template.target_type,
            target_id=obj.pk, namespace="support", actor_id="x", actor_type="SYSTEM_PROCESS",
            session_id=None, payload={"n": n}, policy_version="", state=None,
            prev_hash=template.hash, hash="",
        )  # fmt: skip
        op.id = f"00000000-0000-4000-8000-{n:012d}"
        op.hash = operation_hash(op)
        ops.append(op)
    store.get().insert(Operation, ops)
    back = dict(Operation.objects.filter(payload__has_key="n").values_list("id", "hash"))
    assert {str(k): v for k, v in back.items()} == {op.id: op.hash for op in ops}
    assert Operation.objects.filter(hash__in=[ops[0].hash, ops[-1].hash]).count() == 2
    assert Operation.objects.filter(prev_hash=template.hash).count() == rows


@pytest.mark.django_db
def test_a_value_that_is_no_digest_is_refused_not_stored_as_other_bytes():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: elsewhere the column is text and keeps what it is given")
    with pytest.raises(ValueError, match="not a SHA-256 hex digest"):
        Operation.objects.filter(hash="abc").exists()
