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

import pyarrow as pa
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from feedback import object_rollup, retrieval_rollup, window_rollup
from feedback.models import FeedbackSession, InjectionEvent, SessionNamespace, SignalRecord
from rms import oplog, replay
from rms.archive import Archive
from rms.models import GENESIS_HASH, ChainCheckpoint, Namespace, Operation
from rms.oplog import canonical_json
from rms.replay import iso
from rms.store import partitions, pgcopy

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
    namespaces = list(Namespace.objects.filter(retention_days__isnull=False).order_by("name"))
    results = _run(namespaces, now or timezone.now(), batch)
    total = {"namespaces": len(namespaces), "batches": 0, "operations": 0, "sessions": 0,
             "partitions_dropped": 0}  # fmt: skip
    for result in results.values():
        for key in ("batches", "operations", "sessions", "partitions_dropped"):
            total[key] += result.get(key, 0)
    return total


def cut_of(ns: Namespace, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=ns.retention_days)


def run_namespace(ns: Namespace, now: datetime | None = None, *, batch: int = BATCH) -> dict:
    """Archive what of ``ns`` is older than its cut; ``{"batches", "operations", "sessions",
    "cut", "partitions_dropped"}``. A namespace without a retention period is left alone."""
    if ns.retention_days is None:
        return {"batches": 0, "operations": 0, "sessions": 0, "cut": None}
    return _run([ns], now or timezone.now(), batch)[ns.name]


def _run(namespaces: list[Namespace], now: datetime, batch: int) -> dict[str, dict]:
    """The pass over ``namespaces``. Without whole partitions to drop (SQLite, or nothing old
    enough), each namespace's batches are applied one by one (rows deleted). With them, the
    rows stay until the end and one transaction stores the checkpoints, deletes the archived
    rows outside those partitions and drops the partitions (``_finish``)."""
    if partitions.is_partitioned(connection):
        with transaction.atomic():
            partitions.ensure_ahead(connection, now)
    cuts = {ns.name: cut_of(ns, now) for ns in namespaces}
    archives = {ns.name: archive_for(ns.name) for ns in namespaces}
    manifests = {name: archive.manifest() for name, archive in archives.items()}
    opened = [m["open"] for m in manifests.values() if m.get("open")]
    if opened:  # a pass killed before its end: the same partitions (their rows were kept)
        names = {name for o in opened for name in o["drops"]}
        drops = [p for p in partitions.partitions(connection) if p.name in names]
    else:
        drops = partitions.plan_drops(connection, cuts, TARGETS)
    results = {}
    kept: dict[str, _Kept] = {}
    for ns in namespaces:
        archive, manifest = archives[ns.name], manifests[ns.name]
        if opened or drops:
            kept[ns.name] = _Kept()
            results[ns.name] = _archive_kept(ns.name, cuts[ns.name], archive, manifest, batch,
                                             drops, kept[ns.name])  # fmt: skip
        else:
            results[ns.name] = _archive_deleted(ns.name, cuts[ns.name], archive, manifest, batch)
    if opened or drops:
        dropped = _finish(archives, manifests, drops, kept)
        for name, manifest in manifests.items():
            manifest["open"] = None
            results[name]["partitions_dropped"] = dropped
    for name, manifest in manifests.items():
        manifest["last_pass"] = {"at": iso(timezone.now()), **results[name]}
        archives[name].write_manifest(manifest)
    return results


def _archive_deleted(
    namespace: str, cut: datetime, archive: Archive, manifest: dict, batch: int
) -> dict:
    """Batch by batch: files, manifest, then checkpoints and row deletes (``_apply``)."""
    result = {"batches": 0, "operations": 0, "sessions": 0, "cut": iso(cut)}
    if manifest["batches"]:  # a pass killed between its manifest and its delete: finish it
        last = manifest["batches"][-1]
        _apply(last, chains_of(archive, last), _rows_of(archive, last, [], inside=False))
    while True:
        ops = _select(namespace, cut, batch)
        if not ops:
            break
        entry, chains = _write_batch(archive, manifest, ops, cut)
        manifest["batches"].append(entry)
        archive.write_manifest(manifest)
        _apply(entry, chains, [(iso(op[2]), op[0]) for op in ops])
        result["batches"] += 1
        result["operations"] += len(ops)
        result["sessions"] += len(entry["sessions"])
    return result


def _open_batches(manifest: dict) -> list[dict]:
    return manifest["batches"][manifest["open"]["first_batch"] - 1 :]


class _Kept:
    """What ``_archive_kept`` archived in this pass, for ``_finish``: each chain's checkpoint
    at its last batch (``latest``, as in the batches' chain files) and the ``(ts, seq)`` of the
    operations outside every partition planned to be dropped (``outside``: the rows to delete
    when the drops go ahead; ts as ISO text, as in the batches' Parquet files). A rerun after a
    kill reads the open batches' files back into it; otherwise it is kept in memory, not read
    again."""

    def __init__(self) -> None:
        self.latest: dict[str, dict] = {}
        self.folds: dict[str, _LiveFold] = {}
        self.outside: list[tuple[str, int]] = []


def _archive_kept(
    namespace: str,
    cut: datetime,
    archive: Archive,
    manifest: dict,
    batch: int,
    drops: list,
    kept: _Kept,
) -> dict:
    """Batch by batch, files and manifest only: the rows stay in the database until
    ``_finish``. A ``(ts, seq)`` cursor and the sessions already archived in this pass keep a
    row from being archived twice; the manifest's ``open`` entry holds them, so a rerun after a
    kill continues where the pass stopped."""
    result = {"batches": 0, "operations": 0, "sessions": 0, "cut": iso(cut)}
    if not manifest.get("open"):
        manifest["open"] = {
            "cursor": 0, "after": None, "first_batch": len(manifest["batches"]) + 1,
            "drops": [p.name for p in drops],
        }  # fmt: skip
    state = manifest["open"]
    done_sessions: set[str] = set()
    latest = kept.latest  # each chain's checkpoint so far in this pass
    for entry in _open_batches(manifest):
        done_sessions.update(entry["sessions"])
        latest.update(chains_of(archive, entry))
        kept.outside += _rows_of(archive, entry, drops, inside=False)
    ranges = partitions.scan_ranges(connection, cut)
    while True:
        ops, after = _select_after(namespace, batch, state, done_sessions, ranges)
        if after is None:
            break
        state["after"] = after
        if not ops:
            continue
        entry, chains = _write_batch(archive, manifest, ops, cut, latest, kept.folds)
        entry["kept"] = _kept_counts(ops, namespace, drops, kept.outside)
        manifest["batches"].append(entry)
        archive.write_manifest(manifest)
        done_sessions.update(entry["sessions"])
        latest.update(chains)
        result["batches"] += 1
        result["operations"] += len(ops)
        result["sessions"] += len(entry["sessions"])
    archive.write_manifest(manifest)
    return result


def _kept_counts(
    ops: list[tuple], namespace: str, drops: list, outside: list[tuple[str, int]]
) -> dict[str, int]:
    """The batch's operations of ``namespace``'s chains per partition to drop (checked against
    the partition's rows before it is dropped); the ``(ts, seq)`` of its operations outside
    every partition to drop are added to ``outside``."""
    counts: dict[str, int] = defaultdict(int)
    for op in ops:
        for part in drops:
            if part.lo <= op[2] < part.hi:
                if op[6] == namespace:
                    counts[part.name] += 1
                break
        else:
            outside.append((op[len(OP_COLUMNS)], op[0]))  # ts as the archive has it
    return dict(counts)


def _rows_of(archive: Archive, entry: dict, parts: list, *, inside: bool) -> list[tuple[str, int]]:
    """The ``(ts, seq)`` of a batch's operations inside (or outside) ``parts``, from its
    Parquet file."""
    bounds = [(iso(p.lo), iso(p.hi)) for p in parts]
    table = archive.read_columns(entry["files"]["operations"]["name"], ["seq", "ts"])
    return [
        (ts, seq)
        for seq, ts in zip(table["seq"], table["ts"], strict=True)
        # ISO 8601 UTC to the microsecond, both: compared as text
        if any(lo <= ts < hi for lo, hi in bounds) == inside
    ]


def _select_after(
    namespace: str, batch: int, state: dict, done_sessions: set[str], ranges: list
) -> tuple[list[tuple], list | None]:
    """The next ``batch`` operations before the cut after the pass's cursor, without the
    session chains archived already in this pass, completed with the rest of each new session
    chain; and the new cursor (None: nothing left).

    The cursor is ``state["after"]``, the ``(ts, seq)`` of the last operation read: rows are
    read in ``(ts, seq)`` order, a chain's own order (ts never goes back on a chain), so each
    batch continues every chain where the last one stopped. They are read range by range of
    ``ranges`` (``partitions.scan_ranges``: one partition each), so a batch reads the day it is
    in, not every partition before the cut. ``state["cursor"]`` is a ``seq`` below which
    everything is archived already: a pass opened by a version that read in ``seq`` order."""
    after = state.get("after")
    after = (datetime.fromisoformat(after[0]), after[1]) if after else None
    rows: list[tuple] = []
    for lo, hi in ranges:
        if after is not None and hi <= after[0]:
            continue
        rows += pgcopy.operations_in_range(
            Operation, OP_COLUMNS, namespace=namespace, target_types=list(TARGETS), lo=lo,
            hi=hi, after=after, floor=state["cursor"], limit=batch - len(rows),
        )  # fmt: skip
        if len(rows) >= batch:
            break
    if not rows:
        return [], None
    ops = [op for op in rows if not (op[4] == oplog.TARGET_SESSION and op[5] in done_sessions)]
    partial = _partial_sessions(ops)
    if partial:
        seen = {op[0] for op in ops}
        more = pgcopy.operations_of(Operation, OP_COLUMNS, partial)
        ops.extend(op for op in more if op[0] not in seen)
    ops.sort(key=lambda op: op[0])
    last = rows[-1]
    return ops, [last[len(OP_COLUMNS)], last[0]]  # ts as the database wrote it, seq


def _partial_sessions(ops: list[tuple]) -> list[str]:
    """The sessions of ``ops`` whose chain they do not hold whole: all but those whose
    operations there link from the genesis hash to the session's ``head_hash`` (``ops`` in
    ``(ts, seq)`` order, a chain's order). Only these are read again (a session goes whole);
    read in ``(ts, seq)`` order, most sessions lie in one batch."""
    chains: dict[str, list[tuple]] = defaultdict(list)
    for op in ops:
        if op[4] == oplog.TARGET_SESSION:
            chains[op[5]].append(op)
    if not chains:
        return []
    heads = {
        str(pk): head
        for pk, head in FeedbackSession.objects.filter(id__in=list(chains)).values_list(
            "id", "head_hash"
        )
    }
    partial = []
    for sid, chain in chains.items():
        prev = GENESIS_HASH
        for op in chain:
            if op[13] != prev:
                break
            prev = op[14]
        else:
            if prev == heads.get(sid):
                continue
        partial.append(sid)
    return sorted(partial)


def _finish(
    archives: dict[str, Archive], manifests: dict[str, dict], drops: list, kept: dict[str, _Kept]
) -> int:
    """One transaction for the pass's open batches of every namespace: each chain's last
    checkpoint stored, the archived rows deleted except those of partitions whose rows are all
    archived — checked by count per namespace — which are detached and dropped instead (rows of
    other chains in them copied to the default partition first). Idempotent: a rerun after a
    kill deletes nothing twice, never moves a checkpoint back, skips partitions gone. The
    number of partitions dropped."""
    names = list(manifests)
    with transaction.atomic():
        live = {p.name for p in partitions.partitions(connection)}
        ready = []
        for part in drops:
            if part.name not in live:
                continue
            present = partitions.archivable_counts(connection, part, names, TARGETS)
            archived = {
                name: sum(e.get("kept", {}).get(part.name, 0) for e in _open_batches(m))
                for name, m in manifests.items()
                if m.get("open")
            }
            if all(present.get(n, 0) == archived.get(n, 0) for n in names):
                ready.append(part)
        # a planned partition kept (a row committed late): its archived rows deleted instead
        held = [p for p in drops if p.name in live and p not in ready]
        for name, manifest in manifests.items():
            if not manifest.get("open"):
                continue
            sessions = [s for entry in _open_batches(manifest) for s in entry["sessions"]]
            rows = list(kept[name].outside)
            if held:
                for entry in _open_batches(manifest):
                    rows += _rows_of(archives[name], entry, held, inside=True)
            _store_checkpoints(name, kept[name].latest)
            _delete(rows, sessions)
        if ready:
            object_rollup.forget_state_operations(max(part.hi for part in ready))
        for part in ready:
            partitions.drop(connection, part, names, TARGETS)
    return len(ready)


def _store_checkpoints(namespace: str, chains: dict) -> None:
    objects = {tid: c for tid, c in chains.items() if c["type"] == oplog.TARGET_OBJECT}
    live = {
        str(cp.target_id): cp
        for cp in ChainCheckpoint.objects.select_for_update().filter(target_id__in=objects)
    }
    new, changed = [], []
    for tid, c in objects.items():
        cp = live.get(tid) or ChainCheckpoint(target_id=UUID(tid), target_type=c["type"])
        if cp.seq is not None and cp.seq >= c["seq"]:
            continue
        cp.namespace = namespace
        cp.seq, cp.hash, cp.fold = c["seq"], c["hash"], c["fold"]
        cp.operations = c["operations"]
        cp.ts = datetime.fromisoformat(c["ts"])
        (changed if tid in live else new).append(cp)
    fields = ["namespace", "seq", "hash", "fold", "operations", "ts"]
    ChainCheckpoint.objects.bulk_update(changed, fields, batch_size=1000)
    ChainCheckpoint.objects.bulk_create(new, batch_size=1000)


def _delete(rows: list[tuple[str, int]], sessions: list[str]) -> None:
    """Delete the operations ``rows`` (``(ts, seq)``, ts as ISO text) and the event rows of
    ``sessions``. Each chunk of operations is bounded by its ``ts`` range too: on the
    partitioned log a ``seq`` alone probes every partition's key, the range only those that
    can hold the chunk (rows in ``(ts, seq)`` order lie in one or two)."""
    rows = sorted(rows)
    if rows:
        object_rollup.forget_state_operations(
            datetime.fromisoformat(rows[-1][0]) + timedelta(microseconds=1)
        )
    for start in range(0, len(rows), DELETE_CHUNK):
        chunk = rows[start : start + DELETE_CHUNK]
        Operation.objects.filter(
            seq__in=[seq for _, seq in chunk],
            ts__gte=datetime.fromisoformat(chunk[0][0]),
            ts__lte=datetime.fromisoformat(chunk[-1][0]),
        )._raw_delete("default")
    for start in range(0, len(sessions), DELETE_CHUNK):
        _delete_sessions(sessions[start : start + DELETE_CHUNK])


def _delete_sessions(part: list[str]) -> None:
    """Delete sessions with their rows; the hourly rollup's hours and the retrieval rollup's
    units that held them are read live until their next run (``forget_sessions`` of
    ``feedback.window_rollup`` and ``feedback.retrieval_rollup``, same transaction)."""
    window_rollup.forget_sessions(part)
    retrieval_rollup.forget_sessions(part)
    SignalRecord.objects.filter(feedback_session_id__in=part)._raw_delete("default")
    InjectionEvent.objects.filter(session_id__in=part)._raw_delete("default")
    SessionNamespace.objects.filter(session_id__in=part)._raw_delete("default")
    FeedbackSession.objects.filter(id__in=part)._raw_delete("default")


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
    """The Parquet columns of a batch's operations, built column by column."""
    columns = list(zip(*ops, strict=True))
    cols = {name: list(values) for name, values in zip(OP_COLUMNS, columns, strict=False)}
    if len(columns) > len(OP_COLUMNS):  # read by ``pgcopy``: ts and payload as text too
        cols["ts"], cols["payload"] = list(columns[-2]), list(columns[-1])
    else:
        cols["ts"] = [iso(v) for v in cols["ts"]]
        cols["payload"] = [canonical_json(v) for v in cols["payload"]]
        cols["state"] = [None if v is None else canonical_json(v) for v in cols["state"]]
        cols["id"] = [str(v) for v in cols["id"]]
        cols["target_id"] = [str(v) for v in cols["target_id"]]
    return cols


def _rows_columns(qs, fields: list[str]) -> dict[str, list]:
    """The rows' columns, each named by its database column (a session's ``stored_record`` is
    ``record``, as in archives written before it was renamed; ``model_rows`` names them so)."""
    meta = qs.model._meta
    names = [meta.get_field(f).column for f in fields]
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


#: The column each event table's rows of a batch's sessions are found by.
_SESSION_COLUMNS = {"sessions": "id", "scopes": "session_id", "injections": "session_id",
                    "signals": "feedback_session_id"}  # fmt: skip


def _event_table(model, name: str, sessions: list[str]):
    """A batch's rows of one event table as a pyarrow table (COPY), JSON columns rewritten as
    their canonical text (what the Python path writes: erasure compares it)."""
    table = pgcopy.model_rows(model, _SESSION_COLUMNS[name], sessions)
    for f in model._meta.concrete_fields:
        if f.get_internal_type() == "JSONField" and table.num_rows:
            texts = table.column(f.column).to_pylist()
            values = json.loads("[" + ",".join(t or "null" for t in texts) + "]")
            canonical = [
                None if t is None else canonical_json(v) for t, v in zip(texts, values, strict=True)
            ]
            index = table.schema.get_field_index(f.column)
            table = table.set_column(index, f.column, pa.array(canonical, type=pa.string()))
    return table


def _fields(model) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def _chains(
    ops: list[tuple], namespace: str, latest: dict | None = None, folds: dict | None = None
) -> dict[str, dict]:
    """Each chain's part of the batch: first and last seq, the hash before and after it, and
    for an object the replay fold at its end (continued from its earlier checkpoint: the
    database's, or ``latest``'s — this pass's batches not stored yet; ``folds`` holds the
    live folds of ``latest``'s, continued in place rather than rebuilt from their JSON)."""
    latest = latest or {}
    by_target: dict = defaultdict(list)
    for op in ops:
        by_target[str(op[5])].append(op)
    stored = [tid for tid in by_target if tid not in latest]
    earlier: dict = {
        str(cp.target_id): _Earlier(cp.fold, cp.operations)
        for cp in ChainCheckpoint.objects.filter(target_id__in=stored)
    } if stored else {}  # fmt: skip
    for tid in by_target:
        c = latest.get(tid)
        if c is not None:
            earlier[tid] = _Earlier(c["fold"], c["operations"])
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
            entry["fold"] = _fold(rows, cp.fold if cp else None, folds, target_id)
        chains[str(target_id)] = entry
    return chains


class _Earlier:
    """A chain's checkpoint before a batch: its fold and operation count."""

    __slots__ = ("fold", "operations")

    def __init__(self, fold: dict | None, operations: int) -> None:
        self.fold, self.operations = fold, operations


class _LiveFold:
    """A chain's fold as replay holds it, and the last operation that stored a state."""

    __slots__ = ("fold", "state_op")

    def __init__(self, fold: replay.Fold, state_op: dict | None) -> None:
        self.fold, self.state_op = fold, state_op


def _fold(
    rows: list[tuple], seed: dict | None, folds: dict | None = None, target_id: str = ""
) -> dict | None:
    """The fold after ``rows``, continued from ``seed`` (its JSON), or from ``folds``'s live
    fold of ``target_id`` (the same fold, kept from the chain's last batch), which it updates."""
    live = (folds or {}).pop(target_id, None)
    if live is None:
        live = _LiveFold(replay.fold_from_json(seed), (seed or {}).get("state_op"))
    fold, state_op = live.fold, live.state_op
    try:
        for op in rows:
            replay.step(fold, replay.OpRecord(op[0], op[3], op[2], op[7], op[8], op[9], op[10]))
            if op[12] is not None:
                state_op = {"seq": op[0], "id": str(op[1]), "op_type": op[3], "ts": iso(op[2])}
    except Exception:  # a broken log: no fold stored; verify_replay reports the object
        return None
    if folds is not None:
        live.state_op = state_op
        folds[target_id] = live
    # the last operation that stored a state: what ``state?as_of`` after the cut names
    return {**replay.fold_to_json(fold), "state_op": state_op}


def chains_of(archive: Archive, entry: dict) -> dict:
    """A batch's chain checkpoints, from its own JSON file (the manifest stays small)."""
    return json.loads(archive.read_bytes(entry["chains_file"]["name"]))


def _write_batch(
    archive: Archive,
    manifest: dict,
    ops: list[tuple],
    cut: datetime,
    latest: dict | None = None,
    folds: dict | None = None,
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
        if connection.vendor == "postgresql":  # streamed with COPY (JSON made canonical)
            table = _event_table(qs.model, name, sessions)
            if table.num_rows:
                files[name] = archive.write_arrow(f"{prefix}-{name}.parquet", table)
            continue
        cols = _rows_columns(qs.order_by("pk"), _fields(qs.model))
        if cols[next(iter(cols))]:
            files[name] = archive.write_table(f"{prefix}-{name}.parquet", cols)
    for name, meta in files.items():
        meta["name"] = f"{prefix}-{name}.parquet"
    chains = _chains(ops, archive.namespace, latest, folds)
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


def _apply(entry: dict, chains: dict, rows: list[tuple[str, int]]) -> None:
    """Store the batch's checkpoints and delete its rows (``rows``: its operations' ``(ts,
    seq)``), in one transaction. Idempotent: rows already gone delete nothing, a checkpoint
    never moves back."""
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
        _delete(rows, entry["sessions"])
