"""Erasure in the retention archive (docs/DECISIONS.md "Erasure and the archive").

An erasure whose subject has archived rows rewrites the Parquet files that hold them with the
same rules as the database (``rms.redaction``), and each chain file whose folds carry a renamed
actor or evidence id. Each rewritten file gets a new name (``<old stem>.e<erasure>``); one
atomic manifest write then points the batch at the new files (name, sha256, bytes) and names,
under ``erasures[<id>]``, the file ``erasure-<id>.json`` (written just before) that records the
``[original hash, residual digest]`` of every archived operation it redacted, the chains whose
folds followed and the names it replaced. Only then are the old files deleted.

Resumable: killed before the manifest write, the rerun rewrites from the old files again (the
new names are fixed, so a file is overwritten, never doubled); killed after it, the rerun reads
the recorded pairs back (the rows are already redacted and would no longer show a change),
deletes any old file still there, and the receipt lists the pairs once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.core.cache import cache

from erasure.models import Erasure
from rms.archive import MANIFEST, Archive
from rms.archive_verify import archive, op_from_row, row_of
from rms.oplog import canonical_json
from rms.redaction import (
    ERASURE_OP,
    OBJECT_ERASED_OP,
    Rule,
    redact_fold,
    redact_op,
    redact_session,
    redact_signal,
    residual_digest,
)

Row = dict
#: How long an erasure waits for a retention pass to finish before it fails (and is retried).
LOCK_WAIT = 600


@contextmanager
def retention_paused(erasure_id, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold the retention pass's lock from the archive rewrite to the receipt's commit: a pass
    in between would archive log rows not yet redacted, or write the manifest over ours. The
    lock names the erasure, so the rerun of a killed run takes over the lock it left."""
    from taskruns.tasks import RETENTION_LOCK  # the tasks module imports the erasure run

    owner = f"erasure:{erasure_id}"
    deadline = time.monotonic() + wait
    while not cache.add(RETENTION_LOCK, owner, wait):
        if cache.get(RETENTION_LOCK) == owner:
            break
        if time.monotonic() > deadline:
            raise TimeoutError("a retention pass holds the archive; the erasure will be retried")
        time.sleep(1)
    try:
        yield
    finally:
        cache.delete(RETENTION_LOCK)


def _op_in_scope(kind: str, subject: str) -> Callable[[Row], bool]:
    """Which archived operations the subject reaches: the rows ``tables.scope_of`` selects."""

    def match(row: Row) -> bool:
        if row["op_type"] in (ERASURE_OP, OBJECT_ERASED_OP):
            return False
        if kind == "object":
            return row["target_id"] == subject
        if kind == "actor":
            return row["actor_id"] == subject
        if kind == "session":
            return row["session_id"] == subject
        return True

    return match


def _json(value):
    return None if value is None else canonical_json(value)


def _operations(
    rows: list[Row], kind: str, subject: str, rule: Rule, pairs: list, touched: set
) -> bool:
    match, changed = _op_in_scope(kind, subject), False
    for row in rows:
        if not match(row):
            continue
        op = op_from_row(row)
        redacted = redact_op(rule, op["payload"], op["state"], op["actor_id"])
        if redacted is None:
            continue
        op["payload"], op["state"], op["actor_id"] = redacted
        row["payload"], row["state"] = _json(redacted[0]), _json(redacted[1])
        row["actor_id"] = redacted[2]
        pairs.append([row["hash"], residual_digest(row_of(op))])
        touched.add(row["target_id"])
        changed = True
    return changed


def _sessions(rows: list[Row], kind: str, subject: str, rule: Rule) -> bool:
    if kind not in ("session", "namespace"):  # as ``tables.scope_of``: no session for the rest
        return False
    changed = False
    for row in rows:
        if kind == "session" and row["session_id"] != subject:
            continue
        tags = json.loads(row["context_tags"]) if row["context_tags"] else []
        record = json.loads(row["record"]) if row["record"] else row["record"]
        out = redact_session(rule, row["context_text"], tags, record)
        new = (out[0], canonical_json(out[1]), _json(out[2]))
        if new != (row["context_text"], row["context_tags"], row["record"]):
            row["context_text"], row["context_tags"], row["record"] = new
            changed = True
    return changed


def _signals(rows: list[Row], kind: str, subject: str, rule: Rule) -> bool:
    field = {"object": "object_id", "actor": "actor_id", "session": "session_id"}.get(kind)
    changed = False
    for row in rows:
        if field is not None and row[field] != subject:
            continue
        out = redact_signal(rule, row["reason"], row["actor_id"])
        if out != (row["reason"], row["actor_id"]):
            row["reason"], row["actor_id"] = out
            changed = True
    return changed


def _columns(rows: list[Row], names: list[str]) -> dict[str, list]:
    return {name: [row[name] for row in rows] for name in names}


def _renamed(name: str, erasure_id: str) -> str:
    stem, dot, ext = name.rpartition(".")
    stem = stem.split(".e", 1)[0]  # an earlier erasure's suffix is replaced, not stacked
    return f"{stem}.e{erasure_id[:8]}{dot}{ext}"


def erase_archive(erasure: Erasure, rule: Rule) -> dict:
    """Redact the subject in the namespace's archive: ``{"redacted": [[H, D], …] (the archived
    operations it redacted), "replaced": old file names, "chains": chains whose checkpoint fold
    changed}``, read back from the manifest when a killed run already wrote it."""
    arc = archive(erasure.namespace.name)
    if not arc.exists(MANIFEST):
        return {"redacted": [], "replaced": [], "chains": []}
    eid = str(erasure.pk)
    manifest = arc.manifest()
    entry = manifest.get("erasures", {}).get(eid)
    done = _rewrite(arc, manifest, erasure, rule) if entry is None else _recorded(arc, entry)
    for name in done["replaced"]:  # after the manifest names the new files
        arc.remove(name)
    return done


def _rewrite(arc: Archive, manifest: dict, erasure: Erasure, rule: Rule) -> dict:
    kind, subject, eid = erasure.subject_kind, erasure.pending_subject, str(erasure.pk)
    pairs: list[list[str]] = []
    replaced: list[str] = []
    touched: set[str] = set()  # chains with a redacted operation: their folds follow
    for batch in manifest["batches"]:
        for table, meta in batch["files"].items():
            rows = arc.read_table(meta["name"])
            if not rows:
                continue
            if table == "operations":
                changed = _operations(rows, kind, subject, rule, pairs, touched)
            elif table == "sessions":
                changed = _sessions(rows, kind, subject, rule)
            elif table == "signals":
                changed = _signals(rows, kind, subject, rule)
            else:
                changed = False
            if changed:
                new = _renamed(meta["name"], eid)
                info = arc.write_table(new, _columns(rows, list(rows[0])))
                replaced.append(meta["name"])
                meta.update(info, name=new)
    for batch in manifest["batches"]:
        _chains_file(arc, batch, rule, eid, replaced, touched)
    done = {"redacted": pairs, "replaced": replaced, "chains": sorted(touched)}
    # the lists grow with the subject (a namespace: every archived operation), so they go in a
    # file of their own, written before the manifest that names it; the manifest stays small
    data = json.dumps(done, sort_keys=True).encode()
    name = f"erasure-{eid}.json"
    arc.write_bytes(name, data)
    manifest.setdefault("erasures", {})[eid] = {
        "name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
    }  # fmt: skip
    arc.write_manifest(manifest)
    return done


def _recorded(arc: Archive, entry: dict) -> dict:
    """What a killed run of this erasure recorded: its file (or, in a manifest written before
    the file existed, the entry itself)."""
    if "redacted" in entry:
        return entry
    return json.loads(arc.read_bytes(entry["name"]))


def _chains_file(
    arc: Archive, batch: dict, rule: Rule, eid: str, replaced: list, touched: set
) -> None:
    """The batch's checkpoints with each touched chain's fold as its redacted operations
    replay to (a fold carries the tallies of earlier batches, so every batch is read)."""
    meta = batch["chains_file"]
    chains = json.loads(arc.read_bytes(meta["name"]))
    out = {
        tid: {**c, "fold": redact_fold(rule, c.get("fold"))} if tid in touched else c
        for tid, c in chains.items()
    }
    if out == chains:
        return
    data = json.dumps(out, sort_keys=True).encode()
    new = _renamed(meta["name"], eid)
    arc.write_bytes(new, data)
    replaced.append(meta["name"])
    meta.update(name=new, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
