"""Rows of a table streamed with PostgreSQL's COPY into a pyarrow table (no Python per row).

The retention pass archives the event rows of a batch's sessions this way: ``COPY (SELECT …) TO
STDOUT`` as CSV, read by pyarrow's CSV reader with each column's type taken from the model's
field (integers, floats, booleans; everything else text), timestamps formatted by the database as
``rms.replay.iso`` writes them (UTC, ISO 8601 to the microsecond). PostgreSQL only.
"""

from __future__ import annotations

import io

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
