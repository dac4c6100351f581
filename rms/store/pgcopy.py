"""The retention pass's reads of rows to archive (PostgreSQL only).

``model_rows``: rows of a table streamed with PostgreSQL's COPY into a pyarrow table (no Python
per row). The retention pass archives the event rows of a batch's sessions this way: ``COPY
(SELECT …) TO STDOUT`` as CSV, read by pyarrow's CSV reader with each column's type taken from
the model's field (integers, floats, booleans; everything else text), timestamps formatted by the
database as ``rms.replay.iso`` writes them (UTC, ISO 8601 to the microsecond).

``operations_in_range`` and ``operations_of``: operation rows as tuples for the fold and the
archive, with the database doing the text work (``_operation_column``).
"""

from __future__ import annotations

import io
import json
from datetime import datetime

import pyarrow as pa
import pyarrow.csv as pacsv
from django.db import connection

_TYPES = {
    "AutoField": pa.int64(), "BigAutoField": pa.int64(), "SmallAutoField": pa.int64(),
    "IntegerField": pa.int64(), "BigIntegerField": pa.int64(), "SmallIntegerField": pa.int64(),
    "PositiveIntegerField": pa.int64(), "PositiveBigIntegerField": pa.int64(),
    "PositiveSmallIntegerField": pa.int64(), "FloatField": pa.float64(),
    "BooleanField": pa.bool_(),
}  # fmt: skip
_ISO = """'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'"""


def _operation_column(model, name: str, alias: str) -> str:
    """One operation column as ``_operation_rows`` reads it: uuids and JSON as their text (the
    JSON parsed in one call per read, not one per row by the driver), hashes (``bytea``,
    ``rms.store.fields``) as hex, timestamps formatted as ``rms.replay.iso`` writes them."""
    f = model._meta.get_field(name)
    col = f'{alias}."{f.column}"'
    kind = f.get_internal_type()
    if kind in ("UUIDField", "JSONField"):
        return f"{col}::text"
    if f.db_type(connection) == "bytea":  # a HashField
        return f"encode({col}, 'hex')"
    if kind == "DateTimeField":
        return f"to_char({col} AT TIME ZONE 'UTC', {_ISO})"
    return col


def _operation_rows(
    model, columns: tuple[str, ...], rest: str, params: list, *, by_ts: bool = False
) -> list[tuple]:
    """``columns`` of the operations ``o`` of ``FROM table o {rest}``, each row a tuple in
    ``columns``' order with ``ts`` a datetime and ``payload`` parsed, followed by two more
    values: ``ts`` and ``payload`` as the database's text (what the archive stores: readers
    parse the JSON, so the value and the recomputed hash are those of the canonical text)."""
    select = ", ".join(_operation_column(model, c, "o") for c in columns)
    with connection.cursor() as cur:
        cur.execute(f"SELECT {select} FROM {model._meta.db_table} o {rest}", params)
        rows = cur.fetchall()
    if not rows:
        return []
    ts_at, payload_at = columns.index("ts"), columns.index("payload")
    if by_ts:  # in (ts, seq) order: ISO text of one format sorts as its time
        seq_at = columns.index("seq")
        rows.sort(key=lambda r: (r[ts_at], r[seq_at]))
    payloads = json.loads("[" + ",".join(r[payload_at] for r in rows) + "]")
    parse = datetime.fromisoformat
    out = []
    for r, payload in zip(rows, payloads, strict=True):
        row = list(r)
        row[ts_at], row[payload_at] = parse(r[ts_at]), payload
        row += (r[ts_at], r[payload_at])
        out.append(tuple(row))
    return out


def operations_in_range(
    model,
    columns: tuple[str, ...],
    *,
    namespace: str,
    target_types: list[str],
    lo: datetime | None,
    hi: datetime,
    after: tuple[datetime, int] | None,
    floor: int,
    limit: int,
) -> list[tuple]:
    """At most ``limit`` operations of ``namespace``'s chains of ``target_types`` with ``lo <=
    ts < hi``, ``(ts, seq)`` after ``after`` and ``seq`` above ``floor``, in ``(ts, seq)`` order
    (rows as ``_operation_rows``). The range's bounds are literals, so the planner reads only
    the partitions (one day, or the default) that can hold them. The keys are sorted and cut
    first, then only those rows are read and turned into text (sorting whole rows spilled to
    disk and formatted every row of the range for each batch)."""
    bounds, params = ["ts < %s"], [hi]
    if lo is not None:
        bounds.append("ts >= %s")
        params.append(lo)
    if after is not None:
        bounds.append("ts >= %s")
        params.append(after[0])
    where = ["namespace = %s", "target_type = ANY(%s)", "seq > %s", *bounds]
    keys_params = [namespace, list(target_types), floor, *params]
    if after is not None:
        where.append("(ts, seq) > (%s, %s)")
        keys_params += [after[0], after[1]]
    keys = f"SELECT seq, ts FROM {model._meta.db_table} WHERE {' AND '.join(where)}"
    outer = " AND ".join(f"o.{b}" for b in bounds)
    rest = (
        f"JOIN ({keys} ORDER BY ts, seq LIMIT %s) k ON o.seq = k.seq AND o.ts = k.ts "
        f"WHERE {outer}"
    )  # ordered here, not by the database (a sort of whole rows can spill to disk)
    return _operation_rows(model, columns, rest, [*keys_params, limit, *params], by_ts=True)


def operations_of(model, columns: tuple[str, ...], target_ids: list[str]) -> list[tuple]:
    """Every operation of the chains ``target_ids`` (rows as ``_operation_rows``)."""
    return _operation_rows(model, columns, "WHERE o.target_id = ANY(%s::uuid[])", [target_ids])


def model_rows(model, column: str, values: list) -> pa.Table:
    """The rows of ``model`` whose ``column`` is one of ``values`` (uuids), in primary key
    order, every concrete field under its database column's name (as the portable path names
    them: a session's ``stored_record`` is ``record``, as in archives written before)."""
    exprs, types = [], {}
    for f in model._meta.concrete_fields:
        col = f'"{f.column}"'
        if f.get_internal_type() == "DateTimeField":
            col = f"to_char({col} AT TIME ZONE 'UTC', {_ISO})"
        exprs.append(f'{col} AS "{f.column}"')
        types[f.column] = _TYPES.get(f.get_internal_type(), pa.string())
    pk = model._meta.pk.column
    sql = (
        f"COPY (SELECT {', '.join(exprs)} FROM {model._meta.db_table} "
        f'WHERE "{column}" = ANY(%s::uuid[]) ORDER BY "{pk}") TO STDOUT WITH (FORMAT csv, HEADER)'
    )
    connection.ensure_connection()
    buf = io.BytesIO()
    with connection.connection.cursor() as cur, cur.copy(sql, [values]) as copy:
        for chunk in copy:
            buf.write(chunk)
    buf.seek(0)
    return pacsv.read_csv(
        buf,
        convert_options=pacsv.ConvertOptions(
            column_types=types,
            true_values=["t"],
            false_values=["f"],
            strings_can_be_null=True,  # an unquoted empty field is NULL, a quoted one ""
            quoted_strings_can_be_null=False,
        ),
    )
