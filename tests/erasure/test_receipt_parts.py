"""A receipt larger than ``RMS_ERASURE_RECEIPT_PAIRS`` is written as several chained ERASURE
operations, each a receipt in its own right (docs/DECISIONS.md "Erasure and the archive,
continued"): the log verifies, and tampering with a part or a row it lists is still found."""

from __future__ import annotations

import pytest

from rms import verification
from rms.models import Operation
from rms.redaction import ERASURE_OP
from tests.erasure.conftest import ALICE, chain_result, completed, erase

pytestmark = pytest.mark.django_db
PAIRS = 2


@pytest.fixture
def parts(admin_api, client_api, personal_log, settings) -> list[Operation]:
    """Alice erased with at most PAIRS redacted operations per ERASURE operation."""
    settings.RMS_ERASURE_RECEIPT_PAIRS = PAIRS
    receipt = erase(admin_api, "actor", ALICE)
    assert completed(receipt)
    ops = list(
        Operation.objects.filter(op_type=ERASURE_OP, payload__erasure_id=receipt["id"]).order_by(
            "seq"
        )
    )
    assert str(ops[0].id) == receipt["operation_id"]  # the receipt starts at its first part
    assert len(ops) > 1
    listed = [pair for op in ops for pair in op.payload["redacted"]]
    assert len(listed) == len({h for h, _ in listed}) == receipt["counts"]["operations"]
    return ops


def broken(result: dict) -> set[tuple]:
    return {(m.get("seq"), m["reason"]) for m in result["mismatches"]}


def test_each_part_holds_at_most_the_limit_and_everything_verifies(parts):
    n = len(parts)
    assert [(op.payload["part"], op.payload["parts"]) for op in parts] == [
        (i, n) for i in range(1, n + 1)
    ]
    assert all(len(op.payload["redacted"]) <= PAIRS for op in parts)
    assert all(op.prev_hash == before.hash for before, op in zip(parts, parts[1:], strict=False))
    assert chain_result()["ok"], chain_result()
    assert verification.verify_replay_all()["ok"]


@pytest.mark.parametrize("which", [0, -1])
def test_a_deleted_part_is_found(parts, which):
    gone = parts[which]
    vouched = {h for h, _ in gone.payload["redacted"]}
    Operation.objects.filter(seq=gone.seq).delete()
    result = chain_result()
    assert result["ok"] is False
    # the namespace chain breaks there, and the rows only that part listed lost their voucher
    found = broken(result)
    assert {reason for _, reason in found} & {
        "prev_hash does not match the previous operation",
        "the target's head hash is not the chain's last hash",
        "the target's head hash points at operations that are missing",
    }
    rows = Operation.objects.filter(hash__in=vouched).values_list("seq", flat=True)
    assert {(seq, "hash does not match the operation's content") for seq in rows} & found


def test_a_changed_number_in_a_row_a_later_part_lists_is_found(parts):
    listed = {h for h, _ in parts[-1].payload["redacted"]}
    op = next(
        o
        for o in Operation.objects.filter(hash__in=listed)
        if any(type(v) is float for v in o.payload.values())
    )
    key = next(k for k, v in sorted(op.payload.items()) if type(v) is float)
    Operation.objects.filter(seq=op.seq).update(payload={**op.payload, key: op.payload[key] + 1})
    assert (op.seq, "hash does not match the operation's content") in broken(chain_result())


def test_an_edited_part_is_found(parts):
    part = parts[1]
    Operation.objects.filter(seq=part.seq).update(payload={**part.payload, "redacted": []})
    found = broken(chain_result())
    assert (part.seq, "hash does not match the operation's content") in found
