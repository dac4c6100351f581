"""The change feed's reads (``rms.changes``), the parts both stores share, and the portable form.

A page is one range read of the change operations after a position, in feed order, bounded by
what may be released. The predicate names the operation types inline: they are ``rms.events``'
constants, never input, and a literal list lets the planner prove the partial indexes'
predicate even for a generic (prepared) plan, which a parameter list does not. The indexes'
predicate is written from the same list (``change_index_statements``): by migration
``rms/0006`` when they are created, and again after every ``migrate`` when the list in code has
changed since (``sync_change_indexes``), so the list lives in ``rms.events`` alone.

The PostgreSQL form (``rms.store.pgfeed``) orders by ``(txid, seq)`` under the release
horizon; here writers are serialised (SQLite's IMMEDIATE transactions), committed rows
are a prefix in ``seq`` order, and the position is ``(0, seq)``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from django.db import connection

from rms import events
from rms.events import FeedRow, Position


def op_table() -> str:
    from rms.models import Operation

    return connection.ops.quote_name(Operation._meta.db_table)


def op_list(op_types: Iterable[str]) -> str:
    """``op_type IN (...)`` with the names inlined (see the module docstring)."""
    names = sorted(op_types)
    if not set(names) <= set(events.CHANGE_OPS):
        raise ValueError(f"not change operations: {names}")
    return "op_type IN (" + ", ".join(f"'{name}'" for name in names) + ")"


CHANGE_PREDICATE = op_list(events.CHANGE_OPS)

#: The partial indexes over the change operations: name -> key columns on PostgreSQL (feed
#: order is ``(txid, seq)``) and elsewhere (``seq``).
CHANGE_INDEXES = {
    "op_change_feed": ("txid, seq", "seq"),
    "op_change_ns": ("namespace, txid, seq", "namespace, seq"),
}


def change_index_statements(vendor: str, ops: Iterable[str] = events.CHANGE_OPS) -> list[str]:
    """``CREATE INDEX`` of each change index, its predicate naming ``ops``."""
    where = "op_type IN (" + ", ".join(f"'{op}'" for op in sorted(ops)) + ")"
    return [
        f"CREATE INDEX {name} ON {op_table()} ({pg if vendor == 'postgresql' else other}) "
        f"WHERE {where}"
        for name, (pg, other) in CHANGE_INDEXES.items()
    ]


def indexed_change_ops(conn) -> dict[str, frozenset[str]]:
    """The operations each existing change index's predicate names, as the database has it."""
    names = list(CHANGE_INDEXES)
    marks = ", ".join(["%s"] * len(names))
    if conn.vendor == "postgresql":
        sql = f"SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN ({marks})"
    else:
        sql = f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN ({marks})"
    with conn.cursor() as cursor:
        cursor.execute(sql, names)
        found = cursor.fetchall()
    # The predicate follows WHERE; its string literals are the operation names.
    return {
        name: frozenset(re.findall(r"'([^']*)'", definition.split(" WHERE ", 1)[1]))
        for name, definition in found
    }


def sync_change_indexes(conn) -> list[str]:
    """Rebuild the change indexes whose predicate no longer names exactly
    ``events.CHANGE_OPS`` (an event type over a new operation was added); the names rebuilt.
    Indexes not created yet (migration ``rms/0006`` not applied) are left to it. Runs after
    ``migrate``; the rebuild locks the operation table against writes while it lasts."""
    stale = [
        name
        for name, ops in indexed_change_ops(conn).items()
        if ops != frozenset(events.CHANGE_OPS)
    ]
    statements = dict(zip(CHANGE_INDEXES, change_index_statements(conn.vendor), strict=True))
    with conn.cursor() as cursor:
        for name in stale:
            cursor.execute(f"DROP INDEX {name}")
            cursor.execute(statements[name])
    return stale


COLUMNS = "seq, {txid}, id, ts, op_type, target_type, target_id, namespace, payload, state"


def filters(op_types: Sequence[str], namespaces: Sequence[str] | None) -> tuple[list, list]:
    """The page's conditions beyond the position: (SQL terms, parameters)."""
    where, params = [CHANGE_PREDICATE], []
    if set(op_types) != set(events.CHANGE_OPS):
        where.append(op_list(op_types))
    if namespaces is not None:
        where.append(f"namespace IN ({', '.join(['%s'] * len(namespaces))})")
        params.extend(namespaces)
    return where, params


def feed_row(row: tuple, deployment: str | None = None) -> FeedRow:
    """A read ``COLUMNS`` row as its event (the reference form, ``rms.events.event``), its
    cursor naming ``deployment``."""
    seq, txid, op_id, ts, op_type, target_type, target_id, namespace, payload, state = row
    payload, state = _json(payload), _json(state)
    event = events.event(
        seq=int(seq),
        txid=int(txid),
        op_id=_uuid(op_id),
        ts=_datetime(ts),
        op_type=op_type,
        target_type=target_type,
        target_id=_uuid(target_id),
        namespace=namespace,
        payload=payload,
        state=state,
        deployment=deployment,
    )
    return FeedRow(int(txid), int(seq), event["type"], event)


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def _uuid(value) -> uuid.UUID:
    """A raw cursor's UUID: a UUID on PostgreSQL, 32 hex digits on SQLite."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def _datetime(value) -> datetime:
    """A raw cursor's time: a datetime on PostgreSQL, text on SQLite (stored in UTC)."""
    if isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# --- the objects changed since a release bound --------------------------------------------------

#: The object-state operations (``events.OBJECT_STATE_OPS``, all change operations): the change
#: predicate first, so the partial indexes serve the read.
STATE_PREDICATE = CHANGE_PREDICATE + " AND " + op_list(events.OBJECT_STATE_OPS)


def state_changes(
    position: str,
    beyond: int,
    namespaces: Sequence[str] | None,
    before: datetime | None,
    limit: int | None = None,
    cast: str = "",
) -> list[tuple[str, uuid.UUID]]:
    """``(namespace, target id)`` of the object-state operations at or beyond ``beyond`` in
    ``position`` (a release bound: PostgreSQL ``txid``, elsewhere ``seq``), of ``namespaces``
    (``op_change_ns``) or of any (``op_change_feed``), and with ``before`` older than it;
    ``cast`` turns the bound parameter into the position's type. With ``limit``: at most that
    many operations' pairs, repeats kept (a reader past it scans instead; without the limit
    every row beyond the bound would be read first, ≈ 30 µs each)."""
    where = [STATE_PREDICATE, f"{position} >= %s{cast}"]
    params: list = [str(beyond) if cast else beyond]
    if namespaces is not None:
        if not namespaces:
            return []
        where.append(f"namespace IN ({', '.join(['%s'] * len(namespaces))})")
        params.extend(namespaces)
    if before is not None:
        where.append("ts < %s")
        params.append(connection.ops.adapt_datetimefield_value(before))
    sql = f"SELECT {'' if limit else 'DISTINCT '}namespace, target_id FROM {op_table()} "
    sql += "WHERE " + " AND ".join(where)
    if limit:
        sql += " LIMIT %s"
        params.append(limit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(ns, _uuid(target)) for ns, target in cursor.fetchall()]


# --- the portable form ----------------------------------------------------------------------------


def release_bound() -> int:
    """One past the last committed ``seq``, read before the page: a row committed after this
    read has a higher ``seq`` (writers are serialised), so bounding both the page and the head
    by it keeps a write that commits between them for the next read instead of skipping it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {op_table()}")
        return int(cursor.fetchone()[0])


def rows(
    after: Position,
    *,
    below: int,
    limit: int,
    op_types: Sequence[str],
    namespaces: Sequence[str] | None,
    deployment: str | None = None,
) -> list[FeedRow]:
    where, params = filters(op_types, namespaces)
    where.append("seq > %s AND seq < %s")
    sql = (
        f"SELECT {COLUMNS.format(txid='0')} FROM {op_table()} WHERE {' AND '.join(where)} "
        "ORDER BY seq LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, after.seq, below, limit])
        return [feed_row(row, deployment) for row in cursor.fetchall()]


def head(below: int) -> Position | None:
    sql = (
        f"SELECT seq FROM {op_table()} WHERE {CHANGE_PREDICATE} AND seq < %s "
        "ORDER BY seq DESC LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [below])
        row = cursor.fetchone()
    return Position(0, int(row[0])) if row else None
