"""Checks and reads of the retention archive (``rms.archive``; written by
``feedback.retention``): ``verify_archive`` and an object's archived operations for ``as_of``.

``verify_archive`` proves, for each namespace's archive: every file the manifest names has the
bytes it recorded (sha256), every archived chain is intact from genesis (or from the previous
batch's cut) to the checkpoint the manifest records, each object's fold at the cut equals the
replay of its archived operations, and the database continues from there: the checkpoint row
matches, and the first remaining operation follows the checkpoint's hash (or, with none left,
the object's head hash is the checkpoint).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from datetime import datetime

from django.conf import settings

from rms import replay
from rms.archive import MANIFEST, Archive, ArchiveMissing, local_path
from rms.models import GENESIS_HASH, ChainCheckpoint, MemoryObject, Operation
from rms.oplog import TARGET_OBJECT, hash_row
from rms.redaction import LazyRegistry

MAX_LISTED = 100


class Gone(Exception):
    """The answer lies before the cut and the archive that holds it is not there."""


def archive(namespace: str) -> Archive:
    return Archive(settings.RMS_ARCHIVE_URL, namespace)


def namespaces_archived() -> list[str]:
    """The namespaces with a manifest in a local archive folder (a remote archive: those with
    a checkpoint)."""
    import os

    root = local_path(settings.RMS_ARCHIVE_URL)
    if "://" in root:
        return sorted(set(ChainCheckpoint.objects.values_list("namespace", flat=True)))
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if os.path.exists(f"{root}/{d}/{MANIFEST}"))


def op_from_row(row: dict) -> dict:
    """An archived operation row with its JSON columns decoded (the hashed form)."""
    out = dict(row)
    for key in ("payload", "state"):
        out[key] = None if row[key] is None else json.loads(row[key])
    return out


def row_of(op: dict) -> dict:
    """An archived operation's hashed form (``rms.oplog.row_for_hash``)."""
    return {k: op[k] for k in ("id", "ts", "op_type", "target_type", "target_id", "namespace",
                               "actor_id", "actor_type", "session_id", "payload",
                               "policy_version", "state", "prev_hash")}  # fmt: skip


def _hash_ok(op: dict, redactions: LazyRegistry) -> bool:
    """The row gives its stored hash, or it is a redaction a valid ERASURE receipt lists (the
    rule ``verify_chain`` applies to the log)."""
    # imported here: rms.verification reaches rms.selectors, which imports this module
    from rms.verification import redaction_accepted

    row = row_of(op)
    if hash_row(op["prev_hash"], row) == op["hash"]:
        return True
    return redaction_accepted(op["op_type"], op["seq"], op["hash"], row, redactions)


def verify_archive(namespace: str | None = None) -> dict:
    """Check the archive of ``namespace`` (every archived namespace when None); the result
    shape of ``verify_chain``: ``{"ok", "checked" (files), "operations", "mismatch_count",
    "mismatches", "truncated"}``."""
    names = [namespace] if namespace else namespaces_archived()
    result = {"ok": True, "checked": 0, "operations": 0, "mismatch_count": 0, "mismatches": []}

    def add(mismatch: dict) -> None:
        result["mismatch_count"] += 1
        if len(result["mismatches"]) < MAX_LISTED:
            result["mismatches"].append(mismatch)

    for name in names:
        _verify_namespace(archive(name), result, add)
    result["ok"] = result["mismatch_count"] == 0
    result["truncated"] = result["mismatch_count"] > len(result["mismatches"])
    return result


def _verify_namespace(arc: Archive, result: dict, add) -> None:
    ns = arc.namespace
    try:
        manifest = arc.manifest()
    except (ArchiveMissing, ValueError) as exc:
        add({"namespace": ns, "file": MANIFEST, "reason": f"unreadable manifest: {exc}"})
        return
    from rms.verification import load_redactions

    redactions = LazyRegistry(load_redactions)
    heads: dict[str, str] = {}  # chain → hash at the end of the batches read so far
    folds: dict[str, dict | None] = {}
    last: dict[str, dict] = {}
    for batch in manifest["batches"]:
        ops_file = None
        for table, meta in batch["files"].items():
            result["checked"] += 1
            try:
                data = arc.read_bytes(meta["name"])
            except ArchiveMissing as exc:
                add({"namespace": ns, "file": meta["name"], "reason": str(exc)})
                continue
            if hashlib.sha256(data).hexdigest() != meta["sha256"]:
                add({"namespace": ns, "file": meta["name"], "reason": "sha256 differs"})
                continue
            if table == "operations":
                ops_file = meta["name"]
        if ops_file is None:
            continue
        try:
            raw = arc.read_bytes(batch["chains_file"]["name"])
        except ArchiveMissing as exc:
            add({"namespace": ns, "file": batch["chains_file"]["name"], "reason": str(exc)})
            continue
        result["checked"] += 1
        if hashlib.sha256(raw).hexdigest() != batch["chains_file"]["sha256"]:
            add({"namespace": ns, "file": batch["chains_file"]["name"], "reason": "sha256 differs"})
            continue
        chains = json.loads(raw)
        by_chain: dict[str, list[dict]] = defaultdict(list)
        for row in arc.read_table(ops_file):
            by_chain[row["target_id"]].append(op_from_row(row))
        for tid, entry in chains.items():
            ops = sorted(by_chain.pop(tid, []), key=lambda op: op["seq"])
            result["operations"] += len(ops)
            where = {"namespace": ns, "file": ops_file, "target_id": tid}
            broken = _chain(ops, heads.get(tid, GENESIS_HASH), entry, redactions)
            if broken:
                add({**where, **broken})
                continue
            heads[tid] = entry["hash"]
            if entry["type"] == TARGET_OBJECT:
                fold = _fold(ops, folds.get(tid))
                if fold != entry["fold"]:
                    add({**where, "reason": "the fold at the cut differs from the replay"})
                folds[tid] = entry["fold"]
            last[tid] = entry
        for tid in by_chain:
            add({"namespace": ns, "file": ops_file, "target_id": tid,
                 "reason": "operations of a chain the manifest does not list"})  # fmt: skip
    _continues(ns, last, add)


def _chain(ops: list[dict], start: str, entry: dict, redactions: LazyRegistry) -> dict | None:
    if not ops or len(ops) != entry["count"]:
        return {"reason": "the file does not hold the operations the manifest counts"}
    expected = start
    for op in ops:
        if op["prev_hash"] != expected:
            return {"seq": op["seq"], "reason": "prev_hash does not match the previous operation"}
        if not _hash_ok(op, redactions):
            return {"seq": op["seq"], "reason": "hash does not match the operation's content"}
        expected = op["hash"]
    if expected != entry["hash"] or ops[-1]["seq"] != entry["seq"]:
        return {"seq": ops[-1]["seq"], "reason": "the chain does not end at the checkpoint"}
    return None


def _fold(ops: list[dict], seed: dict | None) -> dict | None:
    fold = replay.fold_from_json(seed)
    state_op = (seed or {}).get("state_op")
    try:
        for op in ops:
            replay.step(fold, record(op))
            if op["state"] is not None:
                state_op = {k: op[k] for k in ("seq", "id", "op_type", "ts")}
    except Exception:
        return None
    return {**replay.fold_to_json(fold), "state_op": state_op}


def record(op: dict) -> replay.OpRecord:
    return replay.OpRecord(
        seq=op["seq"], op_type=op["op_type"], ts=datetime.fromisoformat(op["ts"]),
        actor_id=op["actor_id"], actor_type=op["actor_type"], session_id=op["session_id"],
        payload=op["payload"], state=op["state"], id=op["id"],
    )  # fmt: skip


def _continues(ns: str, last: dict[str, dict], add) -> None:
    """The database goes on from each object chain's last checkpoint."""
    objects = {tid: e for tid, e in last.items() if e["type"] == TARGET_OBJECT}
    stored = {str(cp.target_id): cp for cp in ChainCheckpoint.objects.filter(target_id__in=objects)}
    heads = dict(MemoryObject.objects.filter(pk__in=objects).values_list("pk", "head_hash"))
    heads = {str(k): v for k, v in heads.items()}
    for tid, entry in objects.items():
        where = {"namespace": ns, "target_id": tid}
        cp = stored.get(tid)
        if cp is None or cp.hash != entry["hash"] or cp.seq != entry["seq"]:
            add({**where, "reason": "the database's checkpoint differs from the manifest"})
            continue
        first = Operation.objects.filter(target_id=tid).order_by("ts", "seq").first()
        if first is not None and first.prev_hash != entry["hash"]:
            add({**where, "seq": first.seq, "reason": "the log does not follow the checkpoint"})
        elif first is None and heads.get(tid) not in (None, entry["hash"]):
            add({**where, "reason": "the object's head is not the checkpoint"})


def archived_ops(namespace: str, target_id, as_of: datetime | None = None) -> list[dict]:
    """One chain's archived operations (up to ``as_of``), oldest first; ``Gone`` when the
    archive or one of the files that hold them is missing."""
    arc = archive(namespace)
    tid = str(target_id)
    try:
        manifest = arc.manifest() if arc.exists(MANIFEST) else None
        if manifest is None:
            raise Gone(f"The archive of namespace {namespace!r} is not available.")
        ops: list[dict] = []
        for batch in manifest["batches"]:
            rows = arc.read_table(
                batch["files"]["operations"]["name"], filters=[("target_id", "=", tid)]
            )
            ops.extend(op_from_row(row) for row in rows)
    except ArchiveMissing as exc:
        raise Gone(f"The archive of namespace {namespace!r} is not available: {exc}.") from exc
    ops.sort(key=lambda op: op["seq"])
    if as_of is not None:
        ops = [op for op in ops if datetime.fromisoformat(op["ts"]) <= as_of]
    return ops
