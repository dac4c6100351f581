"""The change feed (API.md "The closed loop"): the operation log's state-changing operations as
events, in a stable order, released only when no earlier one can still commit.

The log is the outbox: nothing is written for the feed on the ingestion path. Each operation row
carries the id of the transaction that wrote it (``txid``, a PostgreSQL ``xid8`` column with the
default ``pg_current_xact_id()``, so every insert path — ORM, COPY, array statements — fills it).
The feed's order is ``(txid, seq)`` and a read releases only rows with
``txid < pg_snapshot_xmin(pg_current_snapshot())``, the horizon below which every transaction has
finished. Why that is exactly-once (docs/DECISIONS.md has the proof in full):

- every transaction with an id below the horizon has committed or aborted, so the set of rows
  with ``txid`` below it can never change again;
- a row that commits later belongs to a transaction that was running (or had not started) at the
  read, so its ``txid`` is at or above the horizon, hence above every position already released.

``seq`` alone cannot be the cursor: it is drawn before commit, so seq 101 can commit (and be
read) before seq 100. On SQLite writers are serialised (IMMEDIATE transactions), so committed
rows are a prefix in ``seq`` order; there the position is ``(0, seq)`` and the horizon infinite.

Positions cross the API as opaque cursors; the SQL lives in this module and nowhere else.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from rms.policy import DEPRECATED
from rms.replay import iso

# --- event types (API.md): one place maps operations to them --------------------------------

OBJECT_CREATED = "object.created"
OBJECT_REINFORCED = "object.reinforced"
OBJECT_PENALIZED = "object.penalized"
OBJECT_PINNED = "object.pinned"
OBJECT_UNPINNED = "object.unpinned"
OBJECT_TRANSITIONED = "object.transitioned"
OBJECT_DEPRECATED = "object.deprecated"
OBJECT_CONDITION_CHANGED = "object.condition_changed"
RELATIONSHIP_CREATED = "relationship.created"
RELATIONSHIP_EVIDENCE = "relationship.evidence"
ALERT_RAISED = "alert.raised"
ALERT_RESOLVED = "alert.resolved"
WEBHOOK_TEST = "webhook.test"

#: The operation behind each feed event type.
TYPE_OPS: dict[str, str] = {
    OBJECT_CREATED: "OBJECT_CREATED",
    OBJECT_REINFORCED: "REINFORCE",
    OBJECT_PENALIZED: "PENALTY",
    OBJECT_PINNED: "PIN",
    OBJECT_UNPINNED: "UNPIN",
    OBJECT_TRANSITIONED: "EPISTEMIC_TRANSITION",
    OBJECT_DEPRECATED: "EPISTEMIC_TRANSITION",
    OBJECT_CONDITION_CHANGED: "CONDITION_CHANGED",
    RELATIONSHIP_CREATED: "EDGE_CREATED",
    RELATIONSHIP_EVIDENCE: "EDGE_EVIDENCE",
    ALERT_RAISED: "ALERT_RAISED",
    ALERT_RESOLVED: "ALERT_RESOLVED",
}
FEED_TYPES: tuple[str, ...] = tuple(TYPE_OPS)
#: Every event type, including the webhook-only test event.
EVENT_TYPES: tuple[str, ...] = (*FEED_TYPES, WEBHOOK_TEST)
#: Each change operation's type (EPISTEMIC_TRANSITION has two, told apart by its target state).
_OP_TYPES = {op: type_ for type_, op in TYPE_OPS.items() if op != "EPISTEMIC_TRANSITION"}
#: The operations that are change events (injections, feedback events, checks are facts only).
CHANGE_OPS: tuple[str, ...] = tuple(sorted(set(TYPE_OPS.values())))

_TARGET_TYPES = {
    "memory_object": "object",
    "relationship": "relationship",
    "namespace": "namespace",
}
_OBJECT_DATA = (
    "confidence",
    "salience_base",
    "epistemic_type",
    "condition_state",
    "decay_profile",
    "pinned",
    "reinforcement_count",
    "version",
)
_ALERT_DATA = ("metric", "value", "threshold", "window", "alert_id")

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


class FeedError(ValueError):
    """A malformed cursor or an unknown event type: the caller's mistake (a 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def event_type(op_type: str, state: dict | None, payload: dict | None) -> str | None:
    """The feed type of an operation, or None for operations that are not change events."""
    if op_type == "EPISTEMIC_TRANSITION":
        to = (payload or {}).get("to") or (state or {}).get("epistemic_type")
        return OBJECT_DEPRECATED if to == DEPRECATED else OBJECT_TRANSITIONED
    return _OP_TYPES.get(op_type)


def event_data(op_type: str, state: dict | None, payload: dict | None) -> dict:
    """``data`` of an event (API.md): an object's state after the change (plus the signal for
    reinforced/penalized), a relationship's posterior, an alert's metric and value."""
    state = state or {}
    payload = payload or {}
    if op_type in ("EDGE_CREATED", "EDGE_EVIDENCE"):
        alpha, beta = state.get("alpha"), state.get("beta")
        mean = alpha / (alpha + beta) if alpha is not None and beta else None
        return {"alpha": alpha, "beta": beta, "mean": mean, "version": state.get("version")}
    if op_type in ("ALERT_RAISED", "ALERT_RESOLVED"):
        return {key: payload.get(key) for key in _ALERT_DATA}
    data = {key: state.get(key) for key in _OBJECT_DATA}
    if op_type in ("REINFORCE", "PENALTY"):
        data["signal_type"] = payload.get("signal_type")
        data["session_id"] = payload.get("session_id")
    return data


# --- positions and cursors ----------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """A place in the whole log: (transaction id, seq). Valid with any filter."""

    txid: int
    seq: int


START = Position(0, 0)
_CURSOR = re.compile(r"^(\d{1,20})\.(\d{1,20})$")


def encode_cursor(pos: Position) -> str:
    return base64.urlsafe_b64encode(f"{pos.txid}.{pos.seq}".encode()).decode().rstrip("=")


def decode_cursor(raw: str | None) -> Position:
    """The position of a cursor; START when omitted. Anything else malformed is a FeedError."""
    if raw is None or raw == "":
        return START
    try:
        text = base64.urlsafe_b64decode((raw + "=" * (-len(raw) % 4)).encode()).decode("ascii")
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise FeedError("after", "Malformed cursor.") from exc
    match = _CURSOR.match(text)
    if match is None or len(raw) > 64:
        raise FeedError("after", "Malformed cursor.")
    txid, seq = int(match.group(1)), int(match.group(2))
    if txid >= 2**63 or seq >= 2**63:
        raise FeedError("after", "Malformed cursor.")
    return Position(txid, seq)


def parse_types(raw: str | Iterable[str] | None, *, allowed: Sequence[str] = FEED_TYPES):
    """``types=a,b`` as a frozenset (None for all); an unknown type is a FeedError."""
    if raw is None or raw == "":
        return None
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    names = [item.strip() for item in items if item.strip()]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise FeedError("types", f"Unknown event type(s): {', '.join(unknown)}.")
    return frozenset(names) or None


# --- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    events: list[dict]
    next: Position
    has_more: bool


def _op_table() -> str:
    from rms.models import Operation

    return connection.ops.quote_name(Operation._meta.db_table)


#: The release horizon in one statement: its snapshot's next transaction id (taken when the
#: statement starts), and the ids of the transactions running in this database, read after it.
_HORIZON_SQL = """
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       ARRAY(SELECT backend_xid::text::bigint FROM pg_stat_activity
             WHERE datname = current_database() AND backend_xid IS NOT NULL
             UNION ALL
             SELECT transaction::text::bigint FROM pg_prepared_xacts
             WHERE database = current_database())
"""


def _sql_literal(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.]+", text):
        raise ValueError(f"not a plain name: {text!r}")
    return f"'{text}'"


def _sql_type() -> str:
    """``event_type`` in SQL, generated from TYPE_OPS (one rule, two spellings)."""
    whens = []
    for type_, op in TYPE_OPS.items():
        if op == "EPISTEMIC_TRANSITION":
            continue
        whens.append(f"WHEN {_sql_literal(op)} THEN {_sql_literal(type_)}")
    to = "coalesce(nullif(payload->>'to', ''), state->>'epistemic_type')"
    whens.append(
        f"WHEN 'EPISTEMIC_TRANSITION' THEN CASE WHEN {to} = {_sql_literal(DEPRECATED)} "
        f"THEN {_sql_literal(OBJECT_DEPRECATED)} ELSE {_sql_literal(OBJECT_TRANSITIONED)} END"
    )
    return f"CASE op_type {' '.join(whens)} END"


def _sql_data() -> str:
    """``event_data`` in SQL, generated from the same field lists."""

    def pairs(source: str, keys) -> str:
        return ", ".join(f"{_sql_literal(k)}, {source}->{_sql_literal(k)}" for k in keys)

    alpha, beta = "(state->>'alpha')::float8", "(state->>'beta')::float8"
    mean = (
        f"CASE WHEN {alpha} IS NOT NULL AND {beta} <> 0 "
        f"THEN to_json({alpha} / ({alpha} + {beta})) END"
    )
    edge = (
        "json_build_object('alpha', state->'alpha', 'beta', state->'beta', "
        f"'mean', {mean}, 'version', state->'version')"
    )
    signal = pairs("payload", ("signal_type", "session_id"))
    return (
        "CASE WHEN op_type IN ('EDGE_CREATED', 'EDGE_EVIDENCE') THEN "
        + edge
        + " WHEN op_type IN ('ALERT_RAISED', 'ALERT_RESOLVED') THEN json_build_object("
        + pairs("payload", _ALERT_DATA)
        + ")"
        + " WHEN op_type IN ('REINFORCE', 'PENALTY') THEN json_build_object("
        + pairs("state", _OBJECT_DATA)
        + ", "
        + signal
        + ")"
        + " ELSE json_build_object("
        + pairs("state", _OBJECT_DATA)
        + ") END"
    )


_TARGETS_SQL = " ".join(
    f"WHEN {_sql_literal(k)} THEN {_sql_literal(v)}" for k, v in _TARGET_TYPES.items()
)
_SQL_TYPE = _sql_type() + " AS event_type"
_SQL_EVENT = (
    "json_build_object("
    "'id', id, "
    "'cursor', rtrim(translate(encode(convert_to(txid::text || '.' || seq::text, 'UTF8'), "
    "'base64'), '+/' || chr(10), '-_'), '='), "
    f"'type', {_sql_type()}, "
    "'ts', to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"'), "
    "'namespace', namespace, "
    f"'target_type', CASE target_type {_TARGETS_SQL} ELSE target_type END, "
    "'target_id', target_id, "
    "'op_type', op_type, "
    f"'data', {_sql_data()})::text AS body"
)


def horizon() -> int | None:
    """The transaction id below which every transaction that can write this database has
    finished (PostgreSQL); None where writers are serialised and every committed row is final
    (SQLite).

    It is the oldest transaction running in this database, or the next id when none runs.
    ``pg_snapshot_xmin`` would be correct too, but it is cluster-wide: a long transaction in
    another database of the same server would hold the feed back. A transaction that takes its
    id while the activity list is read takes one at or above the statement snapshot's
    ``xmax``, so it cannot be missed; running ids are 32-bit there and widened with the epoch
    of ``xmax`` (``widen_xid``).
    """
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # activity read fresh, not cached
        cursor.execute(_HORIZON_SQL)
        next_xid, running = cursor.fetchone()
    return min([next_xid, *(widen_xid(xid, next_xid) for xid in running)])


def _bound() -> int:
    """What a page may release: the horizon on PostgreSQL; on SQLite one past the last committed
    ``seq``, read before the page. Writers there are serialised (IMMEDIATE transactions), so a
    row committed after this read has a higher ``seq``: bounding both the page and the head by
    it keeps a write that commits between them for the next read instead of skipping it."""
    below = horizon()
    if below is not None:
        return below
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {_op_table()}")
        return int(cursor.fetchone()[0])


def widen_xid(xid32: int, near: int) -> int:
    """A 32-bit transaction id as the 64-bit id it has, given a 64-bit id ``near`` it (within
    2³¹: ids in use span far less). A running id may be just above ``near`` (taken after the
    snapshot) or below it, possibly across an epoch boundary either way."""
    wide = (near & ~0xFFFFFFFF) | xid32
    if wide > near + 2**31:
        wide -= 2**32
    elif wide < near - 2**31:
        wide += 2**32
    return wide


def _op_list(op_types: Iterable[str]) -> str:
    """``op_type IN (...)`` with the names inlined: they are this module's constants, never
    input, and a literal list lets the planner prove the partial indexes' predicate even for a
    generic (prepared) plan, which a parameter list does not."""
    names = sorted(op_types)
    if not set(names) <= set(CHANGE_OPS):
        raise ValueError(f"not change operations: {names}")
    return "op_type IN (" + ", ".join(f"'{name}'" for name in names) + ")"


_CHANGE_PREDICATE = _op_list(CHANGE_OPS)
_COLUMNS = "seq, {txid}, id, ts, op_type, target_type, target_id, namespace, payload, state"


def _rows(
    after: Position,
    *,
    limit: int,
    namespaces: Sequence[str] | None,
    op_types: Sequence[str],
    below: int,
    text: bool = False,
) -> list[tuple]:
    """Change operations after ``after`` in feed order: one range read on a partial index.
    With ``text`` (PostgreSQL), rows are (seq, txid, type, the event's JSON text)."""
    pg = connection.vendor == "postgresql"
    table = _op_table()
    params: list[Any] = []
    where = [_CHANGE_PREDICATE]
    if pg:
        where.append("(txid, seq) > (%s::text::xid8, %s)")
        params.extend([str(after.txid), after.seq])
        where.append("txid < %s::text::xid8")
        params.append(str(below))
        order = "txid, seq"
        # Aliased: an output column named "txid" would win over the table's in ORDER BY (and a
        # bigint sort cannot use the xid8 index).
        columns = _COLUMNS.format(txid="txid::text::bigint AS position_txid")
        if text:
            columns = f"seq, txid::text::bigint AS position_txid, {_SQL_TYPE}, {_SQL_EVENT}"
    else:
        where.append("seq > %s AND seq < %s")
        params.extend([after.seq, below])
        order = "seq"
        columns = _COLUMNS.format(txid="0")
    if set(op_types) != set(CHANGE_OPS):
        where.append(_op_list(op_types))
    if namespaces is not None:
        where.append(f"namespace IN ({', '.join(['%s'] * len(namespaces))})")
        params.extend(namespaces)
    sql = f"SELECT {columns} FROM {table} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT %s"
    params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _head(after: Position, below: int) -> Position:
    """The last released change position (any namespace, any type): where a consumer whose
    filter matched nothing may resume, so its next read does not rescan what it skipped."""
    table = _op_table()
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT txid::text::bigint AS position_txid, seq FROM {table} "
            f"WHERE {_CHANGE_PREDICATE} AND txid < %s::text::xid8 "
            "ORDER BY txid DESC, seq DESC LIMIT 1"
        )
        params = [str(below)]
    else:
        sql = (
            f"SELECT 0, seq FROM {table} WHERE {_CHANGE_PREDICATE} AND seq < %s "
            "ORDER BY seq DESC LIMIT 1"
        )
        params = [below]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return max(after, Position(int(row[0]), int(row[1]))) if row else after


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def _event(row: tuple) -> dict:
    seq, txid, op_id, ts, op_type, target_type, target_id, namespace, payload, state = row
    payload, state = _json(payload), _json(state)
    return {
        "id": _uuid_text(op_id),
        "cursor": encode_cursor(Position(int(txid), int(seq))),
        "type": event_type(op_type, state, payload),
        "ts": iso(_datetime(ts)),
        "namespace": namespace,
        "target_type": _TARGET_TYPES.get(target_type, target_type),
        "target_id": _uuid_text(target_id),
        "op_type": op_type,
        "data": event_data(op_type, state, payload),
    }


def _uuid_text(value) -> str:
    """A raw cursor's UUID: a UUID on PostgreSQL, 32 hex digits on SQLite."""
    return str(value) if isinstance(value, uuid.UUID) else str(uuid.UUID(value))


def _datetime(value) -> datetime:
    """A raw cursor's time: a datetime on PostgreSQL, text on SQLite (stored in UTC)."""
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def read(
    after: Position = START,
    *,
    limit: int = DEFAULT_LIMIT,
    namespaces: Sequence[str] | None = None,
    types: frozenset[str] | None = None,
    as_json: bool = False,
) -> Page:
    """One page of events after ``after`` (namespaces None: all; types None: all feed types).

    ``next`` is the last returned event's position; when the page is not full it is the last
    released position of the whole log, so it may move past events the filter excludes.

    With ``as_json`` the events are their JSON texts: on PostgreSQL the server writes them
    (``_SQL_EVENT``), which triples the feed's HTTP throughput; ``test_changes`` pins those
    texts to ``_event``, the reference, on every kind of event and on random values.
    """
    if namespaces is not None and not namespaces:
        return Page([], after, False)
    below = _bound()
    op_types = sorted({TYPE_OPS[t] for t in types}) if types else list(CHANGE_OPS)
    in_sql = as_json and connection.vendor == "postgresql"
    rows = _rows(
        after,
        limit=limit + 1,
        namespaces=namespaces,
        op_types=op_types,
        below=below,
        text=in_sql,
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    if in_sql:
        events = [body for _, _, type_, body in rows if not types or type_ in types]
        types = None
    else:
        events = [_event(row) for row in rows]
    if has_more:
        last = rows[-1]
        nxt = Position(int(last[1]), int(last[0]))
    else:
        nxt = _head(Position(int(rows[-1][1]), int(rows[-1][0])) if rows else after, below)
    if types:
        events = [event for event in events if event["type"] in types]
    if as_json and not in_sql:
        events = [json.dumps(event, separators=(",", ":")) for event in events]
    return Page(events, nxt, has_more)


def head() -> Position:
    """The last released position of the whole log: a consumer starting here receives exactly
    the events released after now (a new webhook endpoint, a re-enabled one)."""
    return _head(START, _bound())


def target_events(target_id, *, limit: int = 200, newest_first: bool = False) -> list[dict]:
    """The change events of one target, oldest (or newest) first, for an object's page:
    committed rows only, read without the release horizon because nothing here is a cursor."""
    from rms.models import Operation

    ops = (
        Operation.objects.filter(target_id=target_id, op_type__in=CHANGE_OPS)
        .order_by("-seq" if newest_first else "seq")
        .values("seq", "id", "ts", "op_type", "payload", "state")[:limit]
    )
    return [
        {
            "id": str(op["id"]),
            "seq": op["seq"],
            "type": event_type(op["op_type"], op["state"], op["payload"]),
            "ts": op["ts"],
            "op_type": op["op_type"],
            "data": event_data(op["op_type"], op["state"], op["payload"]),
        }
        for op in ops
    ]
