"""Tampering after an erasure is still found by verify_chain (docs/DECISIONS.md "Erasure"):
a changed number in a redacted operation, a forged or edited ERASURE receipt, a deleted row."""

from __future__ import annotations

import pytest

from rms import oplog, store
from rms.models import Namespace, Operation
from rms.oplog import row_for_hash
from rms.redaction import ERASURE_OP, receipt_mac, residual_digest
from rms.verification import erasure_key
from tests.erasure.conftest import ALICE, chain_result, erase

pytestmark = pytest.mark.django_db


@pytest.fixture
def erased(admin_api, client_api, personal_log):
    """Alice erased: her operations are redacted, the chains verify."""
    receipt = erase(admin_api, "actor", ALICE)
    assert chain_result()["ok"] is True
    listed = {h for h, _ in Operation.objects.get(id=receipt["operation_id"]).payload["redacted"]}
    redacted = Operation.objects.filter(hash__in=listed).order_by("seq")
    assert redacted.count() == len(listed) > 0
    return {"receipt": receipt, "redacted": list(redacted)}


def broken(result: dict) -> list[tuple]:
    return [(m.get("seq"), m["reason"]) for m in result["mismatches"]]


def test_a_redacted_operation_verifies_by_its_receipt(erased):
    op = erased["redacted"][0]
    # its content no longer gives its hash: only the receipt vouches for it
    assert oplog.operation_hash(op) != op.hash


def test_a_changed_number_in_a_redacted_operation_is_found(erased):
    op = next(o for o in erased["redacted"] if o.op_type == "REINFORCE")
    payload = {**op.payload, "gamma": op.payload["gamma"] + 1e-9}
    Operation.objects.filter(seq=op.seq).update(payload=payload)
    result = chain_result()
    assert result["ok"] is False
    assert broken(result) == [(op.seq, "hash does not match the operation's content")]


def test_a_changed_stored_state_in_a_redacted_operation_is_found(erased):
    op = next(o for o in erased["redacted"] if o.state is not None)
    Operation.objects.filter(seq=op.seq).update(state={**op.state, "confidence": 0.5})
    assert broken(chain_result()) == [(op.seq, "hash does not match the operation's content")]


def test_a_forged_receipt_vouching_for_a_tampered_operation_is_found(erased):
    """A database writer changes a number and appends, correctly chained, an ERASURE operation
    listing the changed row's digest: without the erasure key its MAC fails."""
    op = next(o for o in erased["redacted"] if o.op_type == "REINFORCE")
    op.payload = {**op.payload, "gamma": 0.99}
    Operation.objects.filter(seq=op.seq).update(payload=op.payload)
    ns = Namespace.objects.get(name="support")
    payload = {"redacted": [[op.hash, residual_digest(row_for_hash(op))]]}
    payload["mac"] = receipt_mac(b"a guessed key", payload)
    forged = oplog.namespace_op(
        ns, ERASURE_OP, ts=ns.last_op_ts, payload=payload, actor_id="x", actor_type="HUMAN_USER"
    )
    store.get().insert(Operation, [forged])
    ns.save(update_fields=["head_hash", "last_op_ts"])
    found = broken(chain_result())
    assert (op.seq, "hash does not match the operation's content") in found
    forged_seq = Operation.objects.get(id=forged.id).seq
    assert (forged_seq, "an ERASURE receipt whose MAC does not check") in found


def test_an_edited_receipt_is_found_and_vouches_for_nothing(erased):
    receipt = Operation.objects.get(id=erased["receipt"]["operation_id"])
    op = next(o for o in erased["redacted"] if o.op_type == "REINFORCE")
    Operation.objects.filter(seq=op.seq).update(payload={**op.payload, "gamma": 0.99})
    changed = {**op.payload, "gamma": 0.99}
    op.payload = changed
    # the edit lists the tampered row's digest, and even re-MACs with the right key: the
    # receipt's own hash no longer matches, so it is reported and ignored
    payload = dict(receipt.payload)
    payload["redacted"] = [
        [h, residual_digest(row_for_hash(op)) if h == op.hash else d]
        for h, d in payload["redacted"]
    ]
    payload["mac"] = receipt_mac(erasure_key(), payload)
    Operation.objects.filter(seq=receipt.seq).update(payload=payload)
    result = chain_result()
    assert (receipt.seq, "hash does not match the operation's content") in broken(result)
    # the tampered operation's chain is reported (at its first unaccepted row)
    assert str(op.target_id) in {m["target_id"] for m in result["mismatches"]}


def test_a_deleted_redacted_row_is_found(erased):
    op = erased["redacted"][0]
    Operation.objects.filter(seq=op.seq).delete()
    result = chain_result()
    assert result["ok"] is False
    reasons = {reason for _, reason in broken(result)}
    assert reasons & {
        "prev_hash does not match the previous operation",
        "the target's head hash is not the chain's last hash",
    }


def test_a_deleted_receipt_is_found(erased):
    receipt = Operation.objects.get(id=erased["receipt"]["operation_id"])
    Operation.objects.filter(seq=receipt.seq).delete()
    result = chain_result()
    assert result["ok"] is False
    found = broken(result)
    # the namespace's head points at a receipt that is gone, and the redacted rows lost their
    # voucher
    assert (None, "the target's head hash points at operations that are missing") in found
    redacted_seqs = {o.seq for o in erased["redacted"]}
    assert redacted_seqs & {seq for seq, _ in found}
