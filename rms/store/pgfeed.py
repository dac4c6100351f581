"""The change feed's reads on PostgreSQL (``rms.changes``; the shared parts: ``rms.store.feed``).

Each operation row carries the id of the transaction that wrote it (``txid``, an ``xid8`` column
defaulting to ``pg_current_xact_id()``, so every insert path fills it). The feed's order is
``(txid, seq)``, and a page releases only rows below the horizon under which every transaction
has finished (``horizon``; the proof is in docs/DECISIONS.md). With ``as_json`` the server
writes each event's JSON text (``_SQL_EVENT``, compiled from ``rms.events.EVENTS``), which
triples the feed's HTTP throughput; ``tests/rms/test_changes.py`` pins those texts to
``rms.events.event`` on every kind of event and on random values.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

from django.db import connection

from rms import events
from rms.events import FeedRow, Position
from rms.store.feed import CHANGE_PREDICATE, COLUMNS, feed_row, filters, op_table

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


def _json_path(source: str, key: str, *, text: bool = False) -> str:
    return f"{source}{'->>' if text else '->'}{_sql_literal(key)}"


def _sql_type() -> str:
    """``events.event_type`` in SQL, compiled from ``events.OP_SHAPES``."""
    target = (
        "coalesce("
        + ", ".join(
            f"nullif({_json_path(source, key, text=True)}, '')" for source, key in events.SELECTOR
        )
        + ")"
    )
    whens = []
    for op, shape in events.OP_SHAPES.items():
        otherwise = _sql_literal(shape.types[None])
        by_state = [
            f"WHEN {target} = {_sql_literal(to)} THEN {_sql_literal(type_)}"
            for to, type_ in shape.types.items()
            if to is not None
        ]
        then = f"CASE {' '.join(by_state)} ELSE {otherwise} END" if by_state else otherwise
        whens.append(f"WHEN {_sql_literal(op)} THEN {then}")
    return f"CASE op_type {' '.join(whens)} END"


def _sql_field(field: events.Field) -> str:
    """One ``data`` field as a ``json_build_object`` key and value."""
    if isinstance(field, events.Copy):
        value = _json_path(field.source, field.key)
    else:
        alpha = f"({_json_path(events.STATE, field.alpha, text=True)})::float8"
        beta = f"({_json_path(events.STATE, field.beta, text=True)})::float8"
        value = (
            f"CASE WHEN {alpha} IS NOT NULL AND {beta} <> 0 "
            f"THEN to_json({alpha} / ({alpha} + {beta})) END"
        )
    return f"{_sql_literal(field.key)}, {value}"


def _sql_data() -> str:
    """``events.event_data`` in SQL: one branch per distinct data shape, covering its ops."""
    groups: dict[tuple, list[str]] = {}
    for op, shape in events.OP_SHAPES.items():
        groups.setdefault(shape.data, []).append(op)
    branches = [
        f"WHEN op_type IN ({', '.join(_sql_literal(op) for op in ops)}) THEN json_build_object("
        + ", ".join(_sql_field(field) for field in data)
        + ")"
        for data, ops in groups.items()
    ]
    return f"CASE {' '.join(branches)} ELSE '{{}}'::json END"


_TARGETS_SQL = " ".join(
    f"WHEN {_sql_literal(k)} THEN {_sql_literal(v)}" for k, v in events.TARGET_TYPES.items()
)
#: A row's position as cursor text, ``txid.seq`` (``events.encode_cursor``).
_POSITION_SQL = "txid::text || '.' || seq::text"
#: The cursor of any suffix (the select list's one parameter: ``.<id>``, or '' for none), encoded
#: whole per row: base64, made URL-safe, unpadded.
CURSOR_ANY_SQL = (
    f"rtrim(translate(encode(convert_to({_POSITION_SQL} || %s::text, 'UTF8'), 'base64'), "
    "'+/' || chr(10), '-_'), '=')"
)
#: The cursor of a hex deployment id, its suffix encoded once per page (``cursor_parts``): per
#: row only the position, with the 0-2 suffix characters that complete its last 3-byte group,
#: is encoded, then the suffix's encoding for that alignment is appended. Digits, '.' and hex
#: digits never encode to '+' or '/' (no 6-bit group of theirs exceeds 57), a whole number of
#: groups has no padding, and at most 43 bytes stay under base64's 76-character line break, so
#: the per-row part needs neither ``translate`` nor ``rtrim``. Parameters: the three heads and
#: the three encoded tails, by the position's length mod 3.
CURSOR_HEX_SQL = (
    f"encode(convert_to({_POSITION_SQL} || (%s::text[])[length({_POSITION_SQL}) %% 3 + 1], "
    f"'UTF8'), 'base64') || (%s::text[])[length({_POSITION_SQL}) %% 3 + 1]"
)
_HEX = re.compile(r"[0-9a-f]+")
#: Each key of ``events.ENVELOPE`` in SQL; the encodings (base64url cursor, ISO 8601 UTC time to
#: the microsecond) are those of ``events.encode_cursor`` and ``rms.replay.iso``.
_ENVELOPE_SQL = {
    "id": "id",
    "cursor": CURSOR_ANY_SQL,
    "type": _sql_type(),
    "ts": "to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')",
    "namespace": "namespace",
    "target_type": f"CASE target_type {_TARGETS_SQL} ELSE target_type END",
    "target_id": "target_id",
    "op_type": "op_type",
    "data": _sql_data(),
}
if tuple(_ENVELOPE_SQL) != events.ENVELOPE:
    raise ImportError("pgfeed's event envelope must list exactly rms.events.ENVELOPE, in order")
_SQL_TYPE = _ENVELOPE_SQL["type"] + " AS event_type"


def _sql_event(cursor: str) -> str:
    envelope = {**_ENVELOPE_SQL, "cursor": cursor}
    return (
        "json_build_object("
        + ", ".join(f"{_sql_literal(key)}, {sql}" for key, sql in envelope.items())
        + ")::text AS body"
    )


_SQL_EVENT = _sql_event(CURSOR_ANY_SQL)
_SQL_EVENT_HEX = _sql_event(CURSOR_HEX_SQL)


def cursor_parts(deployment: str) -> tuple[list[str], list[str]]:
    """The deployment's cursor suffix ``.<id>`` split for ``CURSOR_HEX_SQL``, by the length
    mod 3 of a position's text: the characters that complete the position's last base64 group
    (heads), and the base64url of the rest, unpadded (tails). ``encode_cursor`` of a position
    ``p`` is then ``b64(p + heads[len(p) % 3]) + tails[len(p) % 3]``."""
    suffix = f".{deployment}"
    heads = [suffix[: (3 - r) % 3] for r in range(3)]
    tails = [
        base64.urlsafe_b64encode(suffix[len(head) :].encode()).decode().rstrip("=")
        for head in heads
    ]
    return heads, tails


def horizon() -> int:
    """The transaction id below which every transaction that can write this database has
    finished: what a page may release.

    It is the oldest transaction running in this database, or the next id when none runs.
    ``pg_snapshot_xmin`` would be correct too, but it is cluster-wide: a long transaction in
    another database of the same server would hold the feed back. A transaction that takes its
    id while the activity list is read takes one at or above the statement snapshot's
    ``xmax``, so it cannot be missed; running ids are 32-bit there and widened with the epoch
    of ``xmax`` (``widen_xid``).
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # activity read fresh, not cached
        cursor.execute(_HORIZON_SQL)
        next_xid, running = cursor.fetchone()
    return min([next_xid, *(widen_xid(xid, next_xid) for xid in running)])


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


def rows(
    after: Position,
    *,
    below: int,
    limit: int,
    op_types: Sequence[str],
    namespaces: Sequence[str] | None,
    as_json: bool = False,
    deployment: str | None = None,
) -> list[FeedRow]:
    """Change operations after ``after`` in feed order: one range read on a partial index; the
    events' cursors name ``deployment``."""
    where, params = filters(op_types, namespaces)
    where += ["(txid, seq) > (%s::text::xid8, %s)", "txid < %s::text::xid8"]
    # Aliased: an output column named "txid" would win over the table's in ORDER BY (and a
    # bigint sort cannot use the xid8 index).
    position = "txid::text::bigint AS position_txid"
    head: list = []
    if as_json and deployment is not None and _HEX.fullmatch(deployment):
        # The suffix is the same for every row: encoded here, once per page.
        columns = f"{position}, seq, {_SQL_TYPE}, {_SQL_EVENT_HEX}"
        head = list(cursor_parts(deployment))
    elif as_json:
        columns = f"{position}, seq, {_SQL_TYPE}, {_SQL_EVENT}"
        head = ["" if deployment is None else f".{deployment}"]
    else:
        columns = COLUMNS.format(txid=position)
    sql = (
        f"SELECT {columns} FROM {op_table()} WHERE {' AND '.join(where)} "
        "ORDER BY txid, seq LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*head, *params, str(after.txid), after.seq, str(below), limit])
        found = cursor.fetchall()
    if as_json:
        # The columns are FeedRow's fields, in order: no per-row conversion.
        return list(map(FeedRow._make, found))
    return [feed_row(row, deployment) for row in found]


def head(below: int) -> Position | None:
    sql = (
        f"SELECT txid::text::bigint AS position_txid, seq FROM {op_table()} "
        f"WHERE {CHANGE_PREDICATE} AND txid < %s::text::xid8 "
        "ORDER BY txid DESC, seq DESC LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [str(below)])
        row = cursor.fetchone()
    return Position(int(row[0]), int(row[1])) if row else None
