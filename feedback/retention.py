"""The retention pass: what is older than a namespace's retention period moves to the archive.

For each namespace with ``retention_days`` set, the operations of its objects' chains older than
the cut (now − retention), and its feedback sessions older than it (a session belongs to the
first namespace of its scope, whose chain holds its operation) with their scope rows,
injections and signal records, are written to Parquet files (``rms.archive``), then removed from
the database. Relationship and namespace chains stay whole (their replay reads the full chain).

Resumable and idempotent, in batches of ``BATCH`` operations, each in three steps:

1. write the batch's files (each atomically);
2. append the batch to the manifest (atomically), with each object chain's checkpoint: the hash,
   ``seq`` and ts of its last archived operation and the replay fold there;
3. in one transaction, store the checkpoints (``rms.models.ChainCheckpoint``) and delete the
   batch's rows.

A worker killed before 2 leaves files the manifest does not name (the rerun writes them again);
killed between 2 and 3, the rerun first applies the manifest's last batch (3 is idempotent: it
deletes what is still there and never moves a checkpoint back). Nothing is lost or doubled.

Aggregates live in their own table and keep their lifetime values; ``feedback.rebuild`` leaves
the objects with a checkpoint alone (their log no longer starts at creation).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from feedback.models import FeedbackSession, InjectionEvent, SessionNamespace, SignalRecord
from rms import oplog, replay
from rms.archive import Archive
from rms.models import ChainCheckpoint, Namespace, Operation
from rms.oplog import canonical_json
from rms.replay import iso

#: Operations per batch (one set of files, one manifest entry, one delete transaction).
BATCH = 20_000
#: Rows per DELETE statement.
DELETE_CHUNK = 2000
TARGETS = (oplog.TARGET_OBJECT, oplog.TARGET_SESSION)
OP_COLUMNS = (
    "seq", "id", "ts", "op_type", "target_type", "target_id", "namespace", "actor_id",
    "actor_type", "session_id", "payload", "policy_version", "state", "prev_hash", "hash",
)  # fmt: skip


def archive_for(namespace: str) -> Archive:
    return Archive(settings.RMS_ARCHIVE_URL, namespace)


def run_all(now: datetime | None = None, *, batch: int = BATCH) -> dict:
    """One pass over every namespace with a retention period; the summed counts."""
    total = {"namespaces": 0, "batches": 0, "operations": 0, "sessions": 0}
    for ns in Namespace.objects.filter(retention_days__isnull=False).order_by("name"):
        result = run_namespace(ns, now, batch=batch)
        total["namespaces"] += 1
        for key in ("batches", "operations", "sessions"):
            total[key] += result[key]
    return total


def cut_of(ns: Namespace, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=ns.retention_days)


def run_namespace(ns: Namespace, now: datetime | None = None, *, batch: int = BATCH) -> dict:
    """Archive what of ``ns`` is older than its cut; ``{"batches", "operations", "sessions",
    "cut"}``. A namespace without a retention period is left alone."""
    result = {"batches": 0, "operations": 0, "sessions": 0, "cut": None}
    if ns.retention_days is None:
        return result
    cut = cut_of(ns, now)
    result["cut"] = iso(cut)
    archive = archive_for(ns.name)
    manifest = archive.manifest()
    if manifest["batches"]:  # a pass killed between its manifest and its delete: finish it
        last = manifest["batches"][-1]
        _apply(last, chains_of(archive, last), seqs_of(archive, last))
    while True:
        ops = _select(ns.name, cut, batch)
        if not ops:
            break
        entry, chains = _write_batch(archive, manifest, ops, cut)
        manifest["batches"].append(entry)
        archive.write_manifest(manifest)
        _apply(entry, chains, [op[0] for op in ops])
        result["batches"] += 1
        result["operations"] += len(ops)
        result["sessions"] += len(entry["sessions"])
    manifest["last_pass"] = {"at": iso(timezone.now()), "cut": result["cut"], **result}
    archive.write_manifest(manifest)
    return result


def _select(namespace: str, cut: datetime, batch: int) -> list[tuple]:
    """The oldest ``batch`` operations before ``cut`` (seq order: a prefix of every chain),
    completed with the rest of each session chain they touch (a session goes whole)."""
    base = Operation.objects.filter(namespace=namespace, target_type__in=TARGETS, ts__lt=cut)
    ops = list(base.order_by("seq").values_list(*OP_COLUMNS)[:batch])
    sessions = {op[5] for op in ops if op[4] == oplog.TARGET_SESSION}
    if sessions:
        seen = {op[0] for op in ops}
        more = Operation.objects.filter(target_id__in=sessions).values_list(*OP_COLUMNS)
        ops.extend(op for op in more if op[0] not in seen)
        ops.sort(key=lambda op: op[0])
    return ops


def _op_columns(ops: list[tuple]) -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in OP_COLUMNS}
    for op in ops:
        for name, value in zip(OP_COLUMNS, op, strict=True):
            if name in ("payload", "state"):
                value = None if value is None else canonical_json(value)
            elif name == "ts":
                value = iso(value)
            elif name in ("id", "target_id"):
                value = str(value)
            cols[name].append(value)
    return cols


def _rows_columns(qs, fields: list[str]) -> dict[str, list]:
    """The rows' columns by their database names (a session's ``stored_record`` is ``record``,
    as in archives written before it was renamed)."""
    meta = qs.model._meta
    names = [meta.get_field(f).column if f in _RENAMED else f for f in fields]
    cols: dict[str, list] = {n: [] for n in names}
    for row in qs.values_list(*fields):
        for f, value in zip(names, row, strict=True):
            if isinstance(value, datetime):
                value = iso(value)
            elif isinstance(value, UUID):
                value = str(value)
            elif isinstance(value, list | dict):
                value = canonical_json(value)
            cols[f].append(value)
    return cols


_RENAMED = frozenset({"stored_record"})


def _fields(model) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def _chains(ops: list[tuple], namespace: str) -> dict[str, dict]:
    """Each chain's part of the batch: first and last seq, the hash before and after it, and
    for an object the replay fold at its end (continued from its earlier checkpoint)."""
    by_target: dict = defaultdict(list)
    for op in ops:
        by_target[op[5]].append(op)
    earlier = {cp.target_id: cp for cp in ChainCheckpoint.objects.filter(target_id__in=by_target)}
    chains = {}
    for target_id, rows in by_target.items():
        last = rows[-1]
        cp = earlier.get(target_id)
        entry = {
            "type": last[4], "first_seq": rows[0][0], "prev_hash": rows[0][13],
            "seq": last[0], "hash": last[14], "ts": iso(last[2]), "count": len(rows),
            "operations": len(rows) + (cp.operations if cp else 0), "fold": None,
        }  # fmt: skip
        if last[4] == oplog.TARGET_OBJECT:
            entry["fold"] = _fold(rows, cp.fold if cp else None)
        chains[str(target_id)] = entry
    return chains


def _fold(rows: list[tuple], seed: dict | None) -> dict | None:
    fold = replay.fold_from_json(seed)
    state_op = (seed or {}).get("state_op")
    try:
        for op in rows:
            replay.step(fold, replay.OpRecord(op[0], op[3], op[2], op[7], op[8], op[9], op[10]))
            if op[12] is not None:
                state_op = {"seq": op[0], "id": str(op[1]), "op_type": op[3], "ts": iso(op[2])}
    except Exception:  # a broken log: no fold stored; verify_replay reports the object
        return None
    # the last operation that stored a state: what ``state?as_of`` after the cut names
    return {**replay.fold_to_json(fold), "state_op": state_op}


def chains_of(archive: Archive, entry: dict) -> dict:
    """A batch's chain checkpoints, from its own JSON file (the manifest stays small)."""
    return json.loads(archive.read_bytes(entry["chains_file"]["name"]))


def seqs_of(archive: Archive, entry: dict) -> list[int]:
    """The ``seq`` of every operation of a batch, from its Parquet file."""
    return archive.read_column(entry["files"]["operations"]["name"], "seq")


def _write_batch(
    archive: Archive, manifest: dict, ops: list[tuple], cut: datetime
) -> tuple[dict, dict]:
    number = len(manifest["batches"]) + 1
    prefix = f"{number:06d}"
    sessions = sorted({str(op[5]) for op in ops if op[4] == oplog.TARGET_SESSION})
    files = {"operations": archive.write_table(f"{prefix}-operations.parquet", _op_columns(ops))}
    tables = {
        "sessions": FeedbackSession.objects.filter(id__in=sessions),
        "scopes": SessionNamespace.objects.filter(session_id__in=sessions),
        "injections": InjectionEvent.objects.filter(session_id__in=sessions),
        "signals": SignalRecord.objects.filter(feedback_session_id__in=sessions),
    }
    for name, qs in tables.items():
        cols = _rows_columns(qs.order_by("pk"), _fields(qs.model))
        if cols[next(iter(cols))]:
            files[name] = archive.write_table(f"{prefix}-{name}.parquet", cols)
    for name, meta in files.items():
        meta["name"] = f"{prefix}-{name}.parquet"
    chains = _chains(ops, archive.namespace)
    data = json.dumps(chains, sort_keys=True).encode()
    chains_file = {"name": f"{prefix}-chains.json", "bytes": len(data), "rows": len(chains),
                   "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
    archive.write_bytes(chains_file["name"], data)
    entry = {
        "number": number,
        "namespace": archive.namespace,
        "cut": iso(cut),
        "written_at": iso(timezone.now()),
        "files": files,
        "chains_file": chains_file,
        "sessions": sessions,
    }
    return entry, chains


def _apply(entry: dict, chains: dict, seqs: list[int]) -> None:
    """Store the batch's checkpoints and delete its rows (``seqs``: its operations), in one
    transaction. Idempotent: rows already gone delete nothing, a checkpoint never moves back."""
    objects = {tid: c for tid, c in chains.items() if c["type"] == oplog.TARGET_OBJECT}
    with transaction.atomic():
        live = {
            str(cp.target_id): cp
            for cp in ChainCheckpoint.objects.select_for_update().filter(target_id__in=objects)
        }
        new = []
        for tid, c in objects.items():
            cp = live.get(tid) or ChainCheckpoint(target_id=UUID(tid), target_type=c["type"])
            if cp.seq is not None and cp.seq >= c["seq"]:
                continue
            cp.namespace = entry.get("namespace") or cp.namespace or ""
            cp.seq, cp.hash, cp.fold = c["seq"], c["hash"], c["fold"]
            cp.operations = c["operations"]
            cp.ts = datetime.fromisoformat(c["ts"])
            if tid in live:
                cp.save()
            else:
                new.append(cp)
        ChainCheckpoint.objects.bulk_create(new)
        for start in range(0, len(seqs), DELETE_CHUNK):
            Operation.objects.filter(seq__in=seqs[start : start + DELETE_CHUNK])._raw_delete(
                "default"
            )
        sessions = entry["sessions"]
        for start in range(0, len(sessions), DELETE_CHUNK):
            part = sessions[start : start + DELETE_CHUNK]
            SignalRecord.objects.filter(feedback_session_id__in=part)._raw_delete("default")
            InjectionEvent.objects.filter(session_id__in=part)._raw_delete("default")
            SessionNamespace.objects.filter(session_id__in=part)._raw_delete("default")
            FeedbackSession.objects.filter(id__in=part)._raw_delete("default")
