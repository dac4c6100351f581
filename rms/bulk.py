"""Fast bulk writes for the ingestion path (STYLE §5: large passes in bounded batches).

On PostgreSQL:

- up to ``SMALL`` rows, an insert is one ``INSERT … SELECT FROM unnest(…)`` and an update one
  ``UPDATE … FROM unnest(…)``, each with one array parameter per column, sent in binary:
  constant SQL text (parsed once by the driver, whatever the number of rows) and one round trip;
- above that, inserts stream through ``COPY`` and updates go through a temporary table filled by
  ``COPY`` and one ``UPDATE … FROM``: about one round trip per call instead of Django's per-row
  SQL compilation (its ``bulk_update`` builds a CASE expression per field and row);
- inside :func:`batched`, small statements are queued and sent together through libpq's pipeline
  mode when the block ends (or before a large write, to keep the order): a single-session write
  then costs one round trip for all its tables instead of one or more per table;
- inside :func:`pipelined`, every write, whatever its size, is an array statement sent at once
  without waiting for it: PostgreSQL inserts one batch of rows while Python builds the next
  (feedback ingestion), instead of Python waiting at the end of each COPY.

On SQLite, ``executemany`` of plain statements is already fast. Rows keep their list order, so an
auto-increment column (``Operation.seq``) numbers them in that order.

Values are prepared with each field's own ``get_db_prep_save``, exactly as Django would, on
SQLite. On PostgreSQL, COPY rows carry JSON and aware times as the text PostgreSQL reads, and
array parameters are encoded by ``rms.pgarrays`` (plain types) or psycopg (datetimes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
import threading

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

from rms import fetch, pgarrays
from rms.replay import iso

#: Up to this many rows a write is one statement with array parameters; above, COPY.
SMALL = 50
_state = threading.local()

_temp_ids = itertools.count()


def _insert_fields(model) -> list[models.Field]:
    return [
        f
        for f in model._meta.concrete_fields
        if not (f.primary_key and isinstance(f, models.AutoField | models.BigAutoField))
    ]


def _json(value):
    return None if value is None else json.dumps(value, allow_nan=False)


def _preparers(fields) -> list:
    """One function per column turning an attribute into what the driver sends.

    psycopg 3 adapts UUIDs, aware datetimes and numbers itself, and a JSON text is parsed by
    PostgreSQL into jsonb, so on PostgreSQL only JSON needs work; SQLite gets Django's own
    preparation (UUIDs as hex, JSON as text), which is the reference.
    """
    real = connections[DEFAULT_DB_ALIAS]
    if real.vendor == "postgresql":
        return [_json if isinstance(f, models.JSONField) else None for f in fields]
    return [lambda v, f=f: f.get_db_prep_save(v, real) for f in fields]


def _row_maker(fields):
    """A function turning one object into its row of driver values; a JSON column uses the text
    already encoded for it, if any (``_json_<attname>``, set by ``rms.oplog.append``).

    On PostgreSQL the plain columns of a row are read with one ``itemgetter`` call (C) and only
    the JSON and time columns are filled in one by one: this runs for every row of every bulk
    write. An aware datetime goes as its UTC ISO text from ``rms.replay.iso``, which caches it (a
    session stamps its dozens of rows with one datetime): psycopg's own dumper costs ~1 µs a
    value, a third of a whole operation row.
    """
    attnames = [f.attname for f in fields]
    preparers = _preparers(fields)
    if connection.vendor != "postgresql" or any(
        p is not None and not isinstance(f, models.JSONField)
        for f, p in zip(fields, preparers, strict=True)
    ):
        pairs = list(zip(attnames, preparers, strict=True))

        def generic(obj) -> list:
            values = obj.__dict__
            return [values[a] if prepare is None else prepare(values[a]) for a, prepare in pairs]

        return generic
    json_columns = [
        (i, f.attname, f"_json_{f.attname}")
        for i, f in enumerate(fields)
        if isinstance(f, models.JSONField)
    ]
    time_columns = [i for i, f in enumerate(fields) if isinstance(f, models.DateTimeField)]
    getter = operator.itemgetter(*attnames)
    single = len(attnames) == 1

    def postgres(obj) -> list:
        values = obj.__dict__
        row = [getter(values)] if single else list(getter(values))
        for i, attname, key in json_columns:
            text = values.get(key)
            row[i] = text if text is not None or key in values else _json(values[attname])
        for i in time_columns:
            row[i] = _time_text(row[i])
        return row

    return postgres


def _prepared(objs, fields) -> list[list]:
    """Rows of driver values for these objects (see :func:`_row_maker`)."""
    return list(map(_row_maker(fields), objs))


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _object_columns(fields, objs: list) -> list[list]:
    """PostgreSQL: the objects' attributes as one list per column, the array parameters, which
    psycopg sends in binary: read column by column with C iteration (``map``/``itemgetter``),
    JSON columns as their text (the one ``rms.oplog`` encoded, if any), times as datetimes (the
    binary dumper is C; the ISO text is for COPY's text)."""
    dicts = [obj.__dict__ for obj in objs]
    columns = []
    for field in fields:
        name = field.attname
        if isinstance(field, models.JSONField):
            key = f"_json_{name}"
            columns.append([d[key] if key in d else _json(d[name]) for d in dicts])
        else:
            columns.append(list(map(operator.itemgetter(name), dicts)))
    return _one_type(fields, columns)


def _one_type(fields, columns: list[list]) -> list:
    """The array parameters: each column encoded by ``rms.pgarrays`` (C iteration instead of
    psycopg's Python loop per element). An array holds one type, so a float column holding an
    int (a client's ``1`` for a score) is made all floats first."""
    for i, field in enumerate(fields):
        if isinstance(field, models.FloatField) and set(map(type, columns[i])) - _FLOAT_TYPES:
            columns[i] = [None if v is None else float(v) for v in columns[i]]
    return list(map(pgarrays.encode, columns))


_FLOAT_TYPES = frozenset({float, type(None)})
_sql_cache: dict = {}


def _array_types(fields) -> str:
    # A str column (JSON texts, ids kept as text) arrives as text[], cast like COPY's text.
    return ", ".join(f"%b::{f.db_type(connection)}[]" for f in fields)


def _small_insert_sql(model, fields) -> str:
    key = ("insert", model, tuple(f.attname for f in fields))
    sql = _sql_cache.get(key)
    if sql is None:
        table = _q(model._meta.db_table)
        columns = ", ".join(_q(f.column) for f in fields)
        sql = _sql_cache[key] = (
            f"INSERT INTO {table} ({columns}) SELECT * FROM unnest({_array_types(fields)})"
        )
    return sql


def _small_update_sql(model, pk, fields) -> str:
    key = ("update", model, tuple(f.attname for f in fields))
    sql = _sql_cache.get(key)
    if sql is None:
        table = _q(model._meta.db_table)
        names = ", ".join(_q(f.column) for f in (pk, *fields))
        assignments = ", ".join(f"{_q(f.column)} = v.{_q(f.column)}" for f in fields)
        sql = _sql_cache[key] = (
            f"UPDATE {table} SET {assignments} "
            f"FROM unnest({_array_types((pk, *fields))}) AS v({names}) "
            f"WHERE {table}.{_q(pk.column)} = v.{_q(pk.column)}"
        )
    return sql


def _execute_small(sql: str, params: list) -> None:
    pipe = getattr(_state, "pipe", None)
    if pipe is not None:
        pipe.execute(sql, params)  # sent now; its result is read when the pipeline ends
        return
    queue = getattr(_state, "queue", None)
    if queue is not None:
        queue.append((sql, params))
    else:
        _send([(sql, params)])


def _arrays(rows: int) -> bool:
    """Whether a write of this many rows is one statement over arrays (else COPY)."""
    return rows <= SMALL or getattr(_state, "pipe", None) is not None


def _send(statements: list) -> None:
    """Run statements in one round trip (a pipeline when there are several).

    A plain psycopg Cursor binds parameters on the server, which binary parameters and pipeline
    mode need; it shares the connection, hence the transaction, with Django's cursors.
    """
    if not statements:
        return
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors, fetch.cursor(raw) as cursor:
        if len(statements) == 1:
            cursor.execute(*statements[0])
            return
        with raw.pipeline():
            for sql, params in statements:
                cursor.execute(sql, params)


@contextlib.contextmanager
def pipelined():
    """Send every write of the block to PostgreSQL as it is issued, without waiting for it
    (libpq's pipeline mode): the server executes one statement while Python builds the next,
    and the results are read once, when the block ends. Inside, an insert or update of any size
    is one statement over arrays, since a COPY cannot be pipelined. Errors (a unique key...)
    surface when the block ends. A read inside the block waits for everything sent before it.
    Nested blocks join the outer one. No-op on SQLite.
    """
    if connection.vendor != "postgresql" or getattr(_state, "pipe", None) is not None:
        yield
        return
    _flush_queue()
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors, fetch.cursor(raw) as cursor, raw.pipeline():
        _state.pipe = cursor
        try:
            yield
        finally:
            _state.pipe = None


def pipelining() -> bool:
    """Whether writes are being sent through :func:`pipelined` (so sending early pays)."""
    return getattr(_state, "pipe", None) is not None


@contextlib.contextmanager
def batched():
    """Queue the small writes of the block and send them in one pipeline at its end.

    Large writes (COPY) inside the block first send what is queued, so statements run in the
    order they were issued. Nothing is sent if the block raises (its transaction is rolled back
    anyway). Nested blocks join the outer one. No-op on SQLite.
    """
    if connection.vendor != "postgresql" or getattr(_state, "queue", None) is not None:
        yield
        return
    _state.queue = []
    try:
        yield
        _flush_queue()
    finally:
        _state.queue = None


def _flush_queue() -> None:
    queue = getattr(_state, "queue", None)
    if queue:
        statements = list(queue)
        queue.clear()
        _send(statements)


def insert(model, objs: list) -> None:
    """INSERT every object (without reading back generated keys)."""
    if not objs:
        return
    fields = _insert_fields(model)
    if connection.vendor == "postgresql" and _arrays(len(objs)):
        _execute_small(_small_insert_sql(model, fields), _object_columns(fields, objs))
        return
    rows = _prepared(objs, fields)
    table = _q(model._meta.db_table)
    columns = ", ".join(_q(f.column) for f in fields)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _flush_queue()
            # Raw COPY bypasses Django's cursor wrapper: wrap errors ourselves so a unique-key
            # race is an IntegrityError like any other.
            with (
                connection.wrap_database_errors,
                cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join(["%s"] * len(fields))
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)


def update(model, objs: list, field_names: list[str]) -> None:
    """UPDATE ``field_names`` of every object, matched by primary key."""
    if not objs:
        return
    meta = model._meta
    fields = [meta.get_field(name) for name in field_names]
    if connection.vendor == "postgresql" and _arrays(len(objs)):
        columns = _object_columns([meta.pk, *fields], objs)
        _execute_small(_small_update_sql(model, meta.pk, fields), columns)
        return
    _update(model, fields, _prepared(objs, [meta.pk, *fields]))


def update_values(model, field_names: list[str], rows: list) -> None:
    """UPDATE ``field_names`` from rows of plain values, ``(pk, value, ...)`` in that order: for
    state kept outside model instances (``feedback.services.AggregateStore``)."""
    if not rows:
        return
    meta = model._meta
    fields = [meta.get_field(name) for name in field_names]
    if connection.vendor == "postgresql" and _arrays(len(rows)):
        columns = _one_type([meta.pk, *fields], [list(c) for c in zip(*rows, strict=True)])
        _execute_small(_small_update_sql(model, meta.pk, fields), columns)
        return
    prepare = _value_preparer([meta.pk, *fields])
    _update(model, fields, [prepare(row) for row in rows])


def _value_preparer(fields):
    """A function turning a row of plain values into driver values, as ``_row_maker`` does for
    an object's attributes (JSON as text, aware datetimes as their UTC ISO text on PostgreSQL;
    Django's own preparation on SQLite)."""
    if connection.vendor != "postgresql":
        preparers = _preparers(fields)
        return lambda row: [prepare(v) for prepare, v in zip(preparers, row, strict=True)]
    converters = [
        (i, _json if isinstance(f, models.JSONField) else _time_text)
        for i, f in enumerate(fields)
        if isinstance(f, models.JSONField | models.DateTimeField)
    ]

    def postgres(row) -> list:
        row = list(row)
        for i, convert in converters:
            row[i] = convert(row[i])
        return row

    return postgres


def _time_text(value):
    """An aware datetime as its cached UTC ISO text (COPY's text); anything else unchanged."""
    return iso(value) if value is not None and value.tzinfo is not None else value


def _update(model, fields, rows: list[list]) -> None:
    """UPDATE ``fields`` from prepared rows (primary key first): through a temporary table
    filled by COPY on PostgreSQL, ``executemany`` on SQLite."""
    meta = model._meta
    pk = meta.pk
    table = _q(meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _flush_queue()
            temp = _q(f"_bulk_{meta.db_table}_{next(_temp_ids)}")
            all_fields = [pk, *fields]
            columns = ", ".join(_q(f.column) for f in all_fields)
            definition = ", ".join(f"{_q(f.column)} {f.db_type(connection)}" for f in all_fields)
            cursor.execute(f"CREATE TEMP TABLE {temp} ({definition}) ON COMMIT DROP")
            with (
                connection.wrap_database_errors,
                cursor.cursor.copy(f"COPY {temp} ({columns}) FROM STDIN") as copy,
            ):
                for row in rows:
                    copy.write_row(row)
            assignments = ", ".join(f"{_q(f.column)} = v.{_q(f.column)}" for f in fields)
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM {temp} v "
                f"WHERE {table}.{_q(pk.column)} = v.{_q(pk.column)}"
            )
            cursor.execute(f"DROP TABLE {temp}")
        else:
            assignments = ", ".join(f"{_q(f.column)} = %s" for f in fields)
            rows = [row[1:] + row[:1] for row in rows]
            cursor.executemany(f"UPDATE {table} SET {assignments} WHERE {_q(pk.column)} = %s", rows)
