"""Verification of the operation log: hash chains and replay (SPEC §6).

Both stream operations in ``seq`` order in bounded batches, so they run over any size of log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rms import replay
from rms.models import GENESIS_HASH, MemoryObject, Operation
from rms.oplog import operation_hash

BATCH = 2000


def op_record(op: Operation) -> replay.OpRecord:
    return replay.OpRecord(
        seq=op.seq,
        op_type=op.op_type,
        ts=op.ts,
        actor_id=op.actor_id,
        actor_type=op.actor_type,
        session_id=op.session_id,
        payload=op.payload,
        state=op.state,
    )


def chain_ops(target_id) -> Iterator[Operation]:
    return Operation.objects.filter(target_id=target_id).order_by("seq").iterator(BATCH)


def first_break(ops: Iterable[Operation], head_hash: str) -> dict | None:
    """The first broken link of one target's chain, or None when the chain is intact.

    A changed row fails its own hash; a removed row breaks the next row's ``prev_hash``; a
    truncated tail leaves the target's stored head hash pointing past the last row.
    """
    expected_prev = GENESIS_HASH
    last_seq = None
    for op in ops:
        if op.prev_hash != expected_prev:
            return {"seq": op.seq, "reason": "prev_hash does not match the previous operation"}
        if operation_hash(op) != op.hash:
            return {"seq": op.seq, "reason": "hash does not match the operation's content"}
        expected_prev = op.hash
        last_seq = op.seq
    if head_hash != expected_prev:
        return {"seq": last_seq, "reason": "the target's head hash is not the chain's last hash"}
    return None


def verify_object_chain(obj: MemoryObject) -> dict | None:
    return first_break(chain_ops(obj.pk), obj.head_hash)


def verify_object_replay(obj: MemoryObject) -> list[dict]:
    """Fold the object's log through the policy; compare every stored state and the row."""
    fold = replay.Fold()
    mismatches: list[dict] = []
    for op in chain_ops(obj.pk):
        record = op_record(op)
        state = replay.step(fold, record)
        if record.state is not None and replay.snapshot(state, fold.version) != record.state:
            mismatches.append({"seq": op.seq, "op_type": op.op_type, "where": "stored state"})
    if fold.state is None:
        return [{"seq": None, "where": "no OBJECT_CREATED operation"}]
    if replay.snapshot(fold.state, fold.version) != replay.snapshot(obj.to_state(), obj.version):
        mismatches.append({"seq": None, "where": "object row"})
    return mismatches
