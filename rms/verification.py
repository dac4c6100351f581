"""Verification of the operation log: hash chains and replay (SPEC §6).

Both stream operations in ``seq`` order in bounded batches, so they run over any size of log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby, islice
from operator import itemgetter
from typing import Any, NamedTuple

from django.conf import settings

from rms import replay
from rms.edges import verify_edge_replay
from rms.models import (
    GENESIS_HASH,
    ChainCheckpoint,
    MemoryObject,
    Namespace,
    Operation,
    Relationship,
)
from rms.oplog import TARGET_NAMESPACE, hash_row, row_for_hash
from rms.redaction import ERASURE_OP, LazyRegistry, Registry, receipt_ok

BATCH = 2000


def op_record(op: Operation) -> replay.OpRecord:
    return replay.OpRecord.from_row(op)


def chain_ops(target_id) -> Iterator[Operation]:
    # ts never decreases along a chain, so (ts, seq) is seq order and uses the (target, ts) index.
    return Operation.objects.filter(target_id=target_id).order_by("ts", "seq").iterator(BATCH)


# --- retention checkpoints (an archived prefix: ``feedback.retention``) --------------------------


def checkpoints(target_ids: list) -> dict[Any, dict]:
    """The checkpoints of these targets that have one: target id → {"hash", "seq", "fold"}."""
    rows = ChainCheckpoint.objects.filter(target_id__in=target_ids)
    return {tid: {"hash": h, "seq": seq, "fold": fold} for tid, h, seq, fold in
            rows.values_list("target_id", "hash", "seq", "fold")}  # fmt: skip


def _seed(seeds: dict, target_id) -> dict | None:
    cp = seeds.get(target_id)
    return cp["fold"] if cp else None


def first_break(ops: Iterable[Operation], head_hash: str) -> dict | None:
    """The first broken link of one target's chain, or None when the chain is intact.

    A changed row fails its own hash; a removed row breaks the next row's ``prev_hash``; a
    truncated tail leaves the target's stored head hash pointing past the last row. Strict: the
    head must be the chain's last hash (no writer may be appending meanwhile).
    """
    return _chain_break(ops, head_hash, None, tolerate_appends=False)


def verify_object_chain(obj: MemoryObject) -> dict | None:
    cp = checkpoints([obj.pk]).get(obj.pk)
    start = cp["hash"] if cp else GENESIS_HASH
    return _chain_break(chain_ops(obj.pk), obj.head_hash, None, tolerate_appends=False, start=start)


def verify_object_replay(obj: MemoryObject) -> list[dict]:
    """Fold the object's log through the policy; compare every stored state and the row."""
    fold = replay.fold_from_json(_seed(checkpoints([obj.pk]), obj.pk))
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


# --- whole-log verification (the verify_replay / verify_chain tasks) ---------------------------

#: Targets per chunk: one query for the chunk's rows, one ordered query for their operations.
CHUNK = 1000
#: Mismatches listed in a result; every mismatch is still counted in ``mismatch_count``.
MAX_LISTED = 100

Progress = Callable[[float], None]


class OpRow(NamedTuple):
    """The columns of an operation that hashing and replay read, fetched as a plain tuple (an
    ORM instance per row would cost more than the check itself). Field names match
    ``Operation`` so ``rms.oplog.row_for_hash`` reads it like a model instance."""

    seq: int
    id: Any
    ts: Any
    op_type: str
    target_type: str
    target_id: Any
    namespace: str
    actor_id: str
    actor_type: str
    session_id: str | None
    payload: Any
    policy_version: str
    state: Any
    prev_hash: str
    hash: str


#: Operations read between two progress reports (the task's writer throttles the writes).
PROGRESS_EVERY = 256


class _Report:
    """Counts everything; keeps the first ``MAX_LISTED`` mismatches. Progress is measured in
    operations read, against ``total`` (the operations of the chains checked, counted at the
    start), so it moves evenly however the operations are spread over the targets."""

    def __init__(self, progress: Progress | None = None, total: int = 0) -> None:
        self.checked = 0
        self.operations = 0
        self.mismatch_count = 0
        self.mismatches: list[dict] = []
        self.progress = progress
        self.total = total
        self.done_before = 0  # units of earlier phases (see verify_replay_all)
        self.redactions = LazyRegistry(load_redactions)

    def read_one(self) -> None:
        """One operation read (the hot loops inline this: ~40 ns instead of ~130 ns a call)."""
        self.operations += 1
        if not self.operations % PROGRESS_EVERY:
            self.report(self.operations)

    def finish(self) -> dict:
        if self.progress is not None:
            self.progress(1.0)
        return self.result()

    def report(self, done: int) -> None:
        # below 1.0 while running (operations appended meanwhile may exceed the count); the
        # task's success stores 1.0
        if self.progress is not None and self.total:
            self.progress(min(0.999, done / self.total))

    def add(self, mismatch: dict) -> None:
        self.mismatch_count += 1
        if len(self.mismatches) < MAX_LISTED:
            self.mismatches.append(mismatch)

    def result(self) -> dict:
        return {
            "ok": self.mismatch_count == 0,
            "checked": self.checked,
            "operations": self.operations,
            "mismatch_count": self.mismatch_count,
            "mismatches": self.mismatches,
            "truncated": self.mismatch_count > len(self.mismatches),
        }


def _chunk_ops(target_ids: list) -> Iterator[tuple[Any, Iterator[OpRow]]]:
    """(target_id, its operations in ``seq`` order) for the targets of one chunk, from one
    query ordered by (target_id, seq), streamed in batches."""
    rows = (
        Operation.objects.filter(target_id__in=target_ids)
        .order_by("target_id", "seq")
        .values_list(*OpRow._fields)
        .iterator(chunk_size=BATCH)
    )
    for target_id, group in groupby(rows, key=itemgetter(5)):
        yield target_id, (OpRow(*row) for row in group)


def _in_range(qs, key: str, lo, hi):
    """``qs`` restricted to ``key`` in ``[lo, hi)`` (None: open)."""
    if lo is not None:
        qs = qs.filter(**{f"{key}__gte": lo})
    if hi is not None:
        qs = qs.filter(**{f"{key}__lt": hi})
    return qs


def _object_chunks(fields: Iterable[str], lo=None, hi=None) -> Iterator[list[MemoryObject]]:
    """Every object (with a key in ``[lo, hi)``) in primary-key order, CHUNK at a time, by
    keyset (no long-lived cursor)."""
    last = None
    while True:
        qs = _in_range(MemoryObject.objects.only(*fields).order_by("pk"), "pk", lo, hi)
        if last is not None:
            qs = qs.filter(pk__gt=last)
        chunk = list(qs[:CHUNK])
        if not chunk:
            return
        yield chunk
        last = chunk[-1].pk


def _replay_target(
    obj: MemoryObject, ops: Iterable[OpRow], report: _Report, seed: dict | None = None
) -> None:
    """Fold one object's operations; every stored state and the row must equal the fold.

    The row is read before its operations, so operations appended meanwhile may follow; the
    row is compared with the fold at the row's own ``version``.
    """
    fold = replay.fold_from_json(seed)  # an archived prefix: continue from its checkpoint
    at_row_version = None
    if fold.state is not None and fold.version == obj.version:
        at_row_version = replay.snapshot(fold.state, fold.version)
    oid = str(obj.pk)
    for op in ops:
        report.operations += 1
        if not report.operations % PROGRESS_EVERY:
            report.report(report.operations)
        record = replay.OpRecord.from_row(op)
        try:
            state = replay.step(fold, record)
        except Exception as exc:  # a tampered payload may break the fold anywhere: report it
            report.add(
                {"object_id": oid, "seq": op.seq, "op_type": op.op_type, "where": "replay",
                 "reason": f"{type(exc).__name__}: {exc}"}
            )  # fmt: skip
            for _ in ops:  # drain the rest of this target's operations
                report.read_one()
            return
        expected = replay.snapshot(state, fold.version)
        if record.state is not None and expected != record.state:
            stored = record.state if isinstance(record.state, dict) else {}
            fields = sorted(k for k in expected if expected[k] != stored.get(k))
            report.add(
                {"object_id": oid, "seq": op.seq, "op_type": op.op_type,
                 "where": "stored state", "fields": fields}
            )  # fmt: skip
        if fold.version == obj.version:
            at_row_version = expected
    if fold.state is None:
        report.add({"object_id": oid, "seq": None, "where": "no OBJECT_CREATED operation"})
        return
    row = replay.snapshot(obj.to_state(), obj.version)
    if at_row_version != row:
        fields = sorted(k for k in row if at_row_version is None or at_row_version[k] != row[k])
        report.add({"object_id": oid, "seq": None, "where": "object row", "fields": fields})


def verify_replay_all(progress: Progress | None = None) -> dict:
    """Replay every object's chain through the policy (SPEC §6) in bounded memory.

    Objects in primary-key order, CHUNK at a time; each chunk's operations come from one query
    ordered by (target_id, seq) and are folded as they stream, so memory holds one chunk of
    objects and one batch of operations whatever the size of the log. Read-only; no transaction.
    Returns ``{"ok", "checked" (objects), "operations", "mismatch_count", "mismatches" (the
    first MAX_LISTED, each with ``object_id`` and ``seq``), "truncated"}``.
    """
    object_ops = Operation.objects.filter(target_type="memory_object").count()
    relationship_ops = Operation.objects.filter(target_type="relationship").count()
    report = _Report(progress, object_ops + relationship_ops)
    _replay_objects(report)
    _replay_relationships(report, relationship_ops, done_before=object_ops)
    return report.finish()


#: The tables the whole-log checks walk, each keyed by its primary key (a namespace's chain by
#: its ``uid``), in the order they are checked.
REPLAY_TABLES = ("memory_object", "relationship")
CHAIN_TABLES = ("memory_object", "relationship", "namespace")
KEYS = {"memory_object": "pk", "relationship": "pk", "namespace": "uid"}
MODELS = {"memory_object": MemoryObject, "relationship": Relationship, "namespace": Namespace}


def table_keys(table: str):
    """The queryset of ``table``'s rows and the name of the key a range of them is cut on."""
    return MODELS[table].objects.all(), KEYS[table]


def _range_ops(table: str, lo, hi) -> int:
    """Operations on the chains of ``table``'s targets in ``[lo, hi)``."""
    qs = Operation.objects.filter(target_type=table)
    return _in_range(qs, "target_id", lo, hi).count()


def verify_replay_range(table: str, lo=None, hi=None, progress: Progress | None = None) -> dict:
    """:func:`verify_replay_all` for the targets of one table (``REPLAY_TABLES``) with keys in
    ``[lo, hi)``: one chunk of a fanned-out verification. Same result shape; read-only."""
    total = _range_ops(table, lo, hi)
    report = _Report(progress, total)
    if table == "memory_object":
        _replay_objects(report, lo, hi)
    else:
        _replay_relationships(report, total, lo=lo, hi=hi)
    return report.finish()


def _replay_objects(report: _Report, lo=None, hi=None) -> None:
    fields = ("id", "version", *replay.STATE_FIELDS)
    for chunk in _object_chunks(fields, lo, hi):
        by_id = {obj.pk: obj for obj in chunk}
        seeds = checkpoints(list(by_id))
        for target_id, ops in _chunk_ops(list(by_id)):
            _replay_target(by_id.pop(target_id), ops, report, _seed(seeds, target_id))
        for oid in [oid for oid in by_id if oid in seeds]:  # every operation archived
            _replay_target(by_id.pop(oid), iter(()), report, _seed(seeds, oid))
        for obj in by_id.values():  # objects without a single operation
            report.add(
                {"object_id": str(obj.pk), "seq": None, "where": "no OBJECT_CREATED operation"}
            )
        report.checked += len(chunk)
        report.report(report.operations)


def _replay_relationships(
    report: _Report, relationship_ops: int, *, done_before: int = 0, lo=None, hi=None
) -> None:
    """Relationships (SPEC §13): each posterior re-derived through rms.evidence; their share of
    the progress is their operations, spread evenly over them."""
    rels = _in_range(Relationship.objects.order_by("pk"), "pk", lo, hi)
    count = rels.count()
    per_relationship = relationship_ops / count if count else 0.0
    for done, rel in enumerate(rels.iterator(chunk_size=CHUNK)):
        for mismatch in verify_edge_replay(rel):
            report.add({"relationship_id": str(rel.pk), **mismatch})
        report.checked += 1
        if done % 16 == 15:
            report.report(min(done_before, report.operations) + (done + 1) * per_relationship)


def _chain_break(
    ops: Iterable,
    head_hash: str,
    report: _Report | None,
    *,
    tolerate_appends: bool = True,
    start: str = GENESIS_HASH,
) -> dict | None:
    """The first broken link of one chain (see ``first_break``). With ``tolerate_appends`` (the
    whole-log tasks, which read the head before the operations) the chain may go on past the
    stored head, correctly linked; without it the head must be the last hash. ``start`` is the
    hash the first operation follows: genesis, or the checkpoint of an archived prefix."""
    redactions = report.redactions if report is not None else LazyRegistry(load_redactions)
    expected_prev = start
    last_seq = None
    # a row and its first operation are committed together: the head is never genesis; after
    # an archived prefix the head may be the checkpoint itself
    head_seen = start != GENESIS_HASH and start == head_hash
    broken = None
    for op in ops:
        if report is not None:
            report.operations += 1
            if not report.operations % PROGRESS_EVERY:
                report.report(report.operations)
        if broken is not None:
            if report is None:
                break
            continue  # only the first broken link per target; keep counting
        if op.prev_hash != expected_prev:
            broken = {"seq": op.seq, "reason": "prev_hash does not match the previous operation"}
        elif hash_row(op.prev_hash, row_for_hash(op)) != op.hash and not accepted_redaction(
            op, redactions
        ):
            broken = {"seq": op.seq, "reason": "hash does not match the operation's content"}
        elif forged_receipt(op):
            broken = {"seq": op.seq, "reason": "an ERASURE receipt whose MAC does not check"}
        else:
            expected_prev = op.hash
            last_seq = op.seq
            head_seen = head_seen or op.hash == head_hash
    head_ok = head_seen if tolerate_appends else expected_prev == head_hash
    if broken is None and not head_ok:
        broken = {"seq": last_seq, "reason": "the target's head hash is not the chain's last hash"}
    return broken


def _verify_heads(heads: list[tuple[Any, str, str]], report: _Report) -> None:
    """Check the chains of one chunk of (target_id, target_type, head_hash)."""
    by_id = {target_id: (target_type, head) for target_id, target_type, head in heads}
    starts = {tid: cp["hash"] for tid, cp in checkpoints(list(by_id)).items()}
    for target_id, ops in _chunk_ops(list(by_id)):
        target_type, head = by_id.pop(target_id)
        broken = _chain_break(ops, head, report, start=starts.get(target_id, GENESIS_HASH))
        if broken is not None:
            report.add({"target_id": str(target_id), "target_type": target_type, **broken})
    for target_id, (target_type, head) in by_id.items():  # targets without operations
        if head != starts.get(target_id, GENESIS_HASH):
            report.add(
                {"target_id": str(target_id), "target_type": target_type, "seq": None,
                 "reason": "the target's head hash points at operations that are missing"}
            )  # fmt: skip
    report.checked += len(heads)


def verify_chain_all(
    progress: Progress | None = None,
    *,
    extra_heads: Iterable[tuple[Any, str]] = (),
    extra_type: str = "feedback_session",
    extra_total: int = 0,
) -> dict:
    """Check the hash chain of every object and of every extra target (SPEC §6).

    ``extra_heads`` yields ``(target_id, head_hash)`` for chains whose owners live outside
    ``rms`` (the feedback sessions: ``rms`` never imports ``feedback``); it is consumed CHUNK at
    a time; when ``extra_total`` (its length) is not 0, their operations count in the progress,
    which is measured in operations read (every PROGRESS_EVERY of them). Reports the
    first broken link per target — a changed row, a removed row or a truncated tail — with the
    target id and ``seq``. Read-only; bounded memory as in ``verify_replay_all``.
    """
    types = [*CHAIN_TABLES, *([extra_type] if extra_total else [])]
    report = _Report(progress, Operation.objects.filter(target_type__in=types).count())
    for table in CHAIN_TABLES:
        _chain_table(table, report)
    _chain_heads(extra_heads, extra_type, report)
    return report.finish()


def verify_chain_range(table: str, lo=None, hi=None, progress: Progress | None = None) -> dict:
    """:func:`verify_chain_all` for the targets of one table (``CHAIN_TABLES``) with keys in
    ``[lo, hi)``: one chunk of a fanned-out verification. Same result shape; read-only."""
    report = _Report(progress, _range_ops(table, lo, hi))
    _chain_table(table, report, lo, hi)
    return report.finish()


def verify_chain_heads(
    heads: Iterable[tuple[Any, str]], target_type: str, progress: Progress | None = None
) -> dict:
    """:func:`verify_chain_all` for the given ``(target_id, head_hash)`` chains of a type
    ``rms`` does not own (the feedback sessions of one chunk). Same result shape; read-only."""
    heads = list(heads)
    ids = [target_id for target_id, _ in heads]
    report = _Report(progress, Operation.objects.filter(target_id__in=ids).count() if ids else 0)
    _chain_heads(heads, target_type, report)
    return report.finish()


def _chain_table(table: str, report: _Report, lo=None, hi=None) -> None:
    if table == "memory_object":
        for chunk in _object_chunks(("id", "head_hash"), lo, hi):
            _verify_heads([(obj.pk, "memory_object", obj.head_hash) for obj in chunk], report)
        return
    qs, key = table_keys(table)
    rows = _in_range(qs.order_by(key), key, lo, hi).values_list(key, "head_hash")
    rows = rows.iterator(CHUNK)
    while chunk := list(islice(rows, CHUNK)):
        _verify_heads([(pk, table, head) for pk, head in chunk], report)


def _chain_heads(heads: Iterable[tuple[Any, str]], target_type: str, report: _Report) -> None:
    extra = iter(heads)
    while chunk := list(islice(extra, CHUNK)):
        _verify_heads([(target_id, target_type, head) for target_id, head in chunk], report)


# --- redacted operations (docs/DECISIONS.md "Erasure") --------------------------------------------


def erasure_key() -> bytes:
    """The key of pseudonyms and of ERASURE receipts' MACs: ``RMS_ERASURE_KEY``, else derived
    from ``SECRET_KEY``. It lives outside the database, so a database writer cannot forge a
    receipt; it must be kept as long as the log is (a new key voids the receipts)."""
    raw = getattr(settings, "RMS_ERASURE_KEY", "") or f"rms-erasure:{settings.SECRET_KEY}"
    return hashlib.sha256(raw.encode()).digest()


def load_redactions() -> Registry:
    """Every redaction a valid ERASURE operation lists: one whose own hash and MAC check (a
    forged or edited receipt vouches for nothing; its chain's own check reports it too)."""
    registry = Registry()
    key = erasure_key()
    chains = Namespace.objects.values_list("uid", flat=True)
    receipts = Operation.objects.filter(
        target_id__in=chains, target_type=TARGET_NAMESPACE, op_type=ERASURE_OP
    ).order_by("seq")
    for op in receipts.iterator(BATCH):
        if hash_row(op.prev_hash, row_for_hash(op)) == op.hash and receipt_ok(key, op.payload):
            registry.add(op.seq, op.payload)
    return registry


def forged_receipt(op) -> bool:
    """An ERASURE operation the service did not write (its MAC needs the erasure key)."""
    return op.op_type == ERASURE_OP and not receipt_ok(erasure_key(), op.payload)


def accepted_redaction(op, redactions: LazyRegistry) -> bool:
    """Whether a stored operation whose content no longer gives its hash is an accepted
    redaction: a later valid ERASURE lists its hash with the digest of what it holds now. An
    ERASURE operation itself is never redactable."""
    return redaction_accepted(op.op_type, op.seq, op.hash, row_for_hash(op), redactions)


def redaction_accepted(
    op_type: str, seq: int, stored_hash: str, row: dict, redactions: LazyRegistry
) -> bool:
    """The acceptance rule for a redacted operation, wherever it is stored (the log here, the
    archive's Parquet files in ``rms.archive_verify``): not an ERASURE, and listed by a later
    valid receipt with the digest of ``row`` (its hashed form) as it is now."""
    if op_type == ERASURE_OP:
        return False
    return redactions.get().accepts(seq, stored_hash, row)
