"""The PostgreSQL store: reads in one round trip, writes over binary arrays, COPY and pipelines.

Reads (:meth:`PostgresStore.read`): every select is a constant SQL text (parsed once by
psycopg), membership filters are binary array parameters (``rms.store.pgarrays``: psycopg's
text form of a uuid[] formats each id and runs a quoting regex over it, 1 µs an id; the binary
form is its 16 bytes), and all selects go in one pipeline (``rms.store.pgfetch``); rows become
instances without ``Model.__init__``.

Writes:

- up to ``SMALL`` rows, an insert is one ``INSERT … SELECT FROM unnest(…)`` and an update one
  ``UPDATE … FROM unnest(…)``, each with one array parameter per column, sent in binary:
  constant SQL text whatever the number of rows, and one round trip;
- above that, inserts stream through ``COPY`` and updates go through a temporary table filled by
  ``COPY`` and one ``UPDATE … FROM`` (Django's ``bulk_update`` builds a CASE per field and row);
- inside :meth:`batched`, small statements are queued and sent together through libpq's pipeline
  mode when the block ends (or before a large write, to keep the order): a single-session write
  costs one round trip for all its tables;
- inside :meth:`pipelined`, every write, whatever its size, is an array statement sent at once
  without waiting for it: PostgreSQL inserts one batch of rows while Python builds the next
  (feedback ingestion), instead of Python waiting at the end of each COPY.

Values: psycopg adapts UUIDs, aware datetimes and numbers itself and PostgreSQL parses a JSON
text into jsonb, so only JSON needs work (a row's ``JSON_TEXTS`` when it has them); COPY rows
carry aware times as their UTC ISO text (``rms.replay.iso``, cached: a session stamps its dozens
of rows with one datetime; psycopg's own dumper costs ~1 µs a value).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
import threading
import time
from collections.abc import Sequence

from django.db import connection, models, transaction

from rms.replay import iso
from rms.store import feed, pgarrays, pgfeed, pgfetch
from rms.store.base import MEMBERSHIP, Select, Store, insert_fields, json_texts
from rms.store.fields import HashField

#: Up to this many rows a write is one statement with array parameters; above, COPY.
SMALL = 50
#: ``random_page_cost`` inside ``key_lookups``: a probe of a cached index page (the usual SSD
#: figure), against the default 4 of a disk seek.
KEY_LOOKUP_PAGE_COST = "1.1"
_state = threading.local()
_temp_ids = itertools.count()
_FLOAT_TYPES = frozenset({float, type(None)})
_sql_cache: dict = {}


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _json(value):
    return None if value is None else json.dumps(value, allow_nan=False)


# --- reads ----------------------------------------------------------------------------------------


def _array(field: models.Field, values) -> tuple[str, object]:
    """A membership parameter: the values as one binary array of the column's type."""
    values = list(values)
    if isinstance(field, HashField):
        values = _bytea_texts(values)
    return f"%b::{field.db_type(connection)}[]", pgarrays.encode(values)


def _bytea_texts(values: list) -> list:
    """Hex digests (``HashField``) as bytea's text input, which COPY and a text[] → bytea[]
    cast both parse: without the ``\\x`` prefix the hex would be stored as its ASCII bytes."""
    return [None if v is None else "\\x" + v for v in values]


def _select_query(select: Select) -> tuple[str, list, object]:
    """(SQL, parameters, how rows become results) of one select; the SQL text is constant for
    a given shape of select, so psycopg parses it once."""
    meta = select.model._meta
    where = select.where
    shape = (
        select.model,
        tuple((k, isinstance(v, MEMBERSHIP)) for k, v in where.items()),
        select.pairs[0] if select.pairs else None,
        select.columns,
        select.lock,
    )
    cached = _sql_cache.get(shape)
    params: list = []
    conditions: list[str] = []
    for name, value in where.items():
        f = meta.get_field(name)
        if isinstance(value, MEMBERSHIP):
            mark, param = _array(f, value)
            conditions.append(f"t.{_q(f.column)} = ANY({mark})")
            params.append(param)
        else:
            conditions.append(f"t.{_q(f.column)} = %s")
            params.append(value)
    if select.pairs:
        (a, b), pairs = select.pairs
        fa, fb = meta.get_field(a), meta.get_field(b)
        mark_a, param_a = _array(fa, [p[0] for p in pairs])
        mark_b, param_b = _array(fb, [p[1] for p in pairs])
        conditions.append(
            f"(t.{_q(fa.column)}, t.{_q(fb.column)}) IN (SELECT * FROM unnest({mark_a}, {mark_b}))"
        )
        params += [param_a, param_b]
    if cached is not None:
        return cached[0], params, cached[1]
    if select.columns is None:
        cols, fields = pgfetch.columns(select.model, "t")
        build = pgfetch.Rows(select.model, fields).build
    else:
        fields = [meta.get_field(c) for c in select.columns]
        cols = ", ".join(f"t.{_q(f.column)}" for f in fields)
        build = _tuple_builder(fields)
    sql = f"SELECT {cols} FROM {_q(meta.db_table)} t"
    if conditions:
        sql += " WHERE " + " AND ".join(conditions)
    if select.lock:
        sql += f" ORDER BY t.{_q(meta.pk.column)} FOR UPDATE"
    _sql_cache[shape] = (sql, build)
    return sql, params, build


def _tuple_builder(fields):
    """How rows read as ``columns`` become results: as they are, unless a column needs its
    field's ``from_db_value`` (a JSON column arrives as its text: Django's loader), as the
    portable store's ``values_list`` gives them."""
    converters = [
        (i, f.from_db_value)
        for i, f in enumerate(fields)
        if isinstance(f, models.JSONField | HashField)
    ]
    if not converters:
        return None

    def build(row):
        row = list(row)
        for i, convert in converters:
            if row[i] is not None:
                row[i] = convert(row[i], None, connection)
        return tuple(row)

    return build


# --- writes ---------------------------------------------------------------------------------------


def _columns(fields, rows: Sequence) -> list:
    """The rows' attributes as one binary array parameter per column: read column by column
    with C iteration (``map``/``itemgetter``), JSON columns as their text (the row's own when
    its class names one in ``JSON_TEXTS``), times as datetimes (psycopg's binary dumper is C)."""
    dicts = [row.__dict__ for row in rows]
    texts = json_texts(rows)
    columns = []
    for f in fields:
        name = f.attname
        if isinstance(f, models.JSONField):
            key = texts.get(name)
            if key is not None:
                columns.append(list(map(operator.itemgetter(key), dicts)))
            else:
                columns.append([_json(d[name]) for d in dicts])
        elif isinstance(f, HashField):
            columns.append(_bytea_texts(list(map(operator.itemgetter(name), dicts))))
        else:
            columns.append(list(map(operator.itemgetter(name), dicts)))
    return _one_type(fields, columns)


def _one_type(fields, columns: list[list]) -> list:
    """Each column encoded by ``rms.store.pgarrays``. An array holds one type, so a float column
    holding an int (a client's ``1`` for a score) is made all floats first."""
    for i, f in enumerate(fields):
        if isinstance(f, models.FloatField) and set(map(type, columns[i])) - _FLOAT_TYPES:
            columns[i] = [None if v is None else float(v) for v in columns[i]]
    return list(map(pgarrays.encode, columns))


def _hash_text(value):
    return None if value is None else "\\x" + value


def _time_text(value):
    """An aware datetime as its cached UTC ISO text (COPY's text); anything else unchanged."""
    return iso(value) if value is not None and value.tzinfo is not None else value


def _copy_rows(fields, rows: Sequence) -> list[list]:
    """COPY's text rows: plain columns read with one ``itemgetter`` call (C), JSON columns as
    text (the row's own when it has one), aware times as their ISO text."""
    texts = json_texts(rows)
    getter = operator.itemgetter(*[f.attname for f in fields])
    single = len(fields) == 1
    json_columns = [
        (i, f.attname, texts.get(f.attname))
        for i, f in enumerate(fields)
        if isinstance(f, models.JSONField)
    ]
    time_columns = [i for i, f in enumerate(fields) if isinstance(f, models.DateTimeField)]
    hash_columns = [i for i, f in enumerate(fields) if isinstance(f, HashField)]
    out = []
    for row in rows:
        values = row.__dict__
        line = [getter(values)] if single else list(getter(values))
        for i, attname, key in json_columns:
            line[i] = values[key] if key is not None else _json(values[attname])
        for i in time_columns:
            line[i] = _time_text(line[i])
        for i in hash_columns:
            if line[i] is not None:
                line[i] = "\\x" + line[i]
        out.append(line)
    return out


def _value_rows(fields, rows: Sequence[Sequence]) -> list[list]:
    """COPY's text rows from tuples of plain values (JSON encoded, aware times as ISO text)."""
    converters = [
        (i, _json if isinstance(f, models.JSONField) else _hash_text if isinstance(f, HashField)
         else _time_text)
        for i, f in enumerate(fields)
        if isinstance(f, models.JSONField | models.DateTimeField | HashField)
    ]  # fmt: skip
    out = []
    for row in rows:
        row = list(row)
        for i, convert in converters:
            row[i] = convert(row[i])
        out.append(row)
    return out


def _array_types(fields) -> str:
    # A str column (JSON texts, ids kept as text) arrives as text[], cast like COPY's text.
    return ", ".join(f"%b::{f.db_type(connection)}[]" for f in fields)


def _small_insert_sql(model, fields) -> str:
    key = ("insert", model, tuple(f.attname for f in fields))
    sql = _sql_cache.get(key)
    if sql is None:
        columns = ", ".join(_q(f.column) for f in fields)
        sql = _sql_cache[key] = (
            f"INSERT INTO {_q(model._meta.db_table)} ({columns}) "
            f"SELECT * FROM unnest({_array_types(fields)})"
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


def _send(statements: list) -> None:
    """Run statements in one round trip (a pipeline when there are several), on a plain psycopg
    cursor (server-side binding, which binary parameters and pipeline mode need) that shares
    the connection, hence the transaction, with Django's cursors."""
    if not statements:
        return
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors, pgfetch.cursor(raw) as cursor:
        if len(statements) == 1:
            cursor.execute(*statements[0])
            return
        with raw.pipeline():
            for sql, params in statements:
                cursor.execute(sql, params)


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


def _flush_queue() -> None:
    queue = getattr(_state, "queue", None)
    if queue:
        statements = list(queue)
        queue.clear()
        _send(statements)


def _arrays(rows: int) -> bool:
    """Whether a write of this many rows is one statement over arrays (else COPY)."""
    return rows <= SMALL or getattr(_state, "pipe", None) is not None


def _copy(cursor, table: str, columns: str, rows: list[list]) -> None:
    # Raw COPY bypasses Django's cursor wrapper: wrap errors ourselves so a unique-key race is
    # an IntegrityError like any other.
    with (
        connection.wrap_database_errors,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _update_copied(model, fields, rows: list[list]) -> None:
    """UPDATE ``fields`` from COPY rows (primary key first) through a temporary table."""
    meta = model._meta
    pk = meta.pk
    table = _q(meta.db_table)
    _flush_queue()
    with connection.cursor() as cursor:
        temp = _q(f"_bulk_{meta.db_table}_{next(_temp_ids)}")
        all_fields = [pk, *fields]
        columns = ", ".join(_q(f.column) for f in all_fields)
        definition = ", ".join(f"{_q(f.column)} {f.db_type(connection)}" for f in all_fields)
        cursor.execute(f"CREATE TEMP TABLE {temp} ({definition}) ON COMMIT DROP")
        _copy(cursor, temp, columns, rows)
        assignments = ", ".join(f"{_q(f.column)} = v.{_q(f.column)}" for f in fields)
        cursor.execute(
            f"UPDATE {table} SET {assignments} FROM {temp} v "
            f"WHERE {table}.{_q(pk.column)} = v.{_q(pk.column)}"
        )
        cursor.execute(f"DROP TABLE {temp}")


class PostgresStore(Store):
    vendor = "postgresql"
    parallel_connections = True

    def read(self, selects: Sequence[Select]) -> list[list]:
        queries = [_select_query(s) for s in selects]
        if len(queries) == 1:
            sql, params, build = queries[0]
            found = [pgfetch.rows(sql, params)]
        else:
            found = pgfetch.pipelined([(sql, params) for sql, params, _ in queries])
        return [
            rows if build is None else list(map(build, rows))
            for (_, _, build), rows in zip(queries, found, strict=True)
        ]

    def insert(self, model, rows: Sequence) -> None:
        if not rows:
            return
        fields = insert_fields(model)
        if _arrays(len(rows)):
            _execute_small(_small_insert_sql(model, fields), _columns(fields, rows))
            return
        _flush_queue()
        columns = ", ".join(_q(f.column) for f in fields)
        with connection.cursor() as cursor:
            _copy(cursor, _q(model._meta.db_table), columns, _copy_rows(fields, rows))

    def update(self, model, rows: Sequence, field_names: Sequence[str]) -> None:
        if not rows:
            return
        meta = model._meta
        fields = [meta.get_field(name) for name in field_names]
        if _arrays(len(rows)):
            columns = _columns([meta.pk, *fields], rows)
            _execute_small(_small_update_sql(model, meta.pk, fields), columns)
            return
        _update_copied(model, fields, _copy_rows([meta.pk, *fields], rows))

    def update_values(self, model, field_names: Sequence[str], rows: Sequence[Sequence]) -> None:
        if not rows:
            return
        meta = model._meta
        fields = [meta.get_field(name) for name in field_names]
        if _arrays(len(rows)):
            columns = _one_type([meta.pk, *fields], [list(c) for c in zip(*rows, strict=True)])
            _execute_small(_small_update_sql(model, meta.pk, fields), columns)
            return
        _update_copied(model, fields, _value_rows([meta.pk, *fields], rows))

    @contextlib.contextmanager
    def batched(self):
        if getattr(_state, "queue", None) is not None:
            yield
            return
        _state.queue = []
        try:
            yield
            _flush_queue()
        finally:
            _state.queue = None

    @contextlib.contextmanager
    def pipelined(self):
        """Every write of the block is sent as it is issued (libpq's pipeline mode) and the
        results are read once, when the block ends; a COPY cannot be pipelined, so inside, a
        write of any size is one statement over arrays. A read inside the block waits for
        everything sent before it."""
        if getattr(_state, "pipe", None) is not None:
            yield
            return
        _flush_queue()
        connection.ensure_connection()
        raw = connection.connection
        with connection.wrap_database_errors, pgfetch.cursor(raw) as cursor, raw.pipeline():
            _state.pipe = cursor
            try:
                yield
            finally:
                _state.pipe = None

    def pipelining(self) -> bool:
        return getattr(_state, "pipe", None) is not None

    @contextlib.contextmanager
    def key_lookups(self):
        """PostgreSQL's default ``random_page_cost`` (4) prices an index probe as a disk seek:
        with it, 1,000 keys of a 100,000-row table are read or updated by scanning (and
        hashing) the whole table, 3x the CPU of probing the index, and a cost that grows with
        the table. Inside the block the probes are priced as cached pages (``SET LOCAL``, so
        a rollback undoes it too); the previous value is put back at the end."""
        if getattr(_state, "key_lookups", False) or not connection.in_atomic_block:
            yield
            return
        _flush_queue()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('random_page_cost'), "
                "set_config('random_page_cost', %s, true)",
                [KEY_LOOKUP_PAGE_COST],
            )
            previous = cursor.fetchone()[0]
        _state.key_lookups = True
        try:
            yield
        finally:
            _state.key_lookups = False
        # Not on an error: the transaction is aborted and its rollback restores the value.
        _flush_queue()
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('random_page_cost', %s, true)", [previous])

    def newest_per_key(self, model, key, limits, value, order):
        out: dict = {}
        if not limits:
            return out
        meta = model._meta
        col = {name: _q(meta.get_field(name).column) for name in (key, value, *order)}
        first, second = (col[name] for name in order)
        keys = list(limits)
        # One row per key: an ARRAY() of its newest values, read through the (key, order)
        # index, and the key's position (WITH ORDINALITY) instead of the key, so no UUID is
        # parsed or hashed per value. The key and limit arrays go in binary (pgfetch).
        found = pgfetch.rows(
            f"SELECT c.i, ARRAY(SELECT {col[value]}::text FROM {_q(meta.db_table)} "
            f"WHERE {col[key]} = c.k ORDER BY {first} DESC, {second} DESC LIMIT c.n) "
            f"FROM unnest(%b::uuid[], %b::int[]) WITH ORDINALITY AS c(k, n, i)",
            [keys, [limits[k] for k in keys]],
        )
        for i, values in found:
            if values:
                out[keys[i - 1]] = values
        return out

    def injection_window_sums(self, injections, wasteful_objects):
        # "wasted" as a LEFT JOIN to the wasteful objects (one hash, built once) rather than the
        # portable store's hashed ``IN`` probed per row in each parallel worker: ≈ 55 instead of
        # ≈ 67 ms over the 233k injections of a 7-day window at 1M. COUNT(*) keeps the scan
        # index-only (the (namespace, ts) index covers every column read); both subqueries are
        # pulled up by the planner, so the plan is the one a hand-written join gets.
        columns = ("namespace_id", "ended_unused", "token_cost", "object_id")
        inj_sql, inj_params = injections.order_by().values(*columns).query.sql_with_params()
        w_sql, w_params = wasteful_objects.order_by().query.sql_with_params()
        sql = (
            "SELECT i.namespace_id, COUNT(*), COUNT(*) FILTER (WHERE i.ended_unused), "
            "SUM(i.token_cost) FILTER (WHERE w.object_id IS NOT NULL) "
            f"FROM ({inj_sql}) i LEFT JOIN ({w_sql}) w(object_id) ON w.object_id = i.object_id "
            "GROUP BY i.namespace_id"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*inj_params, *w_params])
            return {
                ns_id: {"namespace_id": ns_id, "n": n, "unused": unused, "wasted": wasted}
                for ns_id, n, unused, wasted in cursor.fetchall()
            }

    @contextlib.contextmanager
    def snapshot(self):
        if connection.in_atomic_block:  # a caller's transaction: its snapshot is the one
            yield
            return
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield

    def settle_writers(self, timeout: float = 10.0) -> None:
        if connection.in_atomic_block:  # our own transaction would be waited for
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            (xmax,) = cursor.fetchone()
        deadline = time.monotonic() + timeout
        while pgfeed.horizon() < xmax and time.monotonic() < deadline:
            time.sleep(0.05)

    def release_bound(self) -> int:
        return pgfeed.horizon()

    def state_changes(self, beyond, namespaces=None, before=None, limit=None):
        # The horizon as text to xid8 (as the feed's pages compare it).
        return feed.state_changes("txid", beyond, namespaces, before, limit, cast="::text::xid8")

    def change_rows(
        self, after, *, below, limit, op_types, namespaces, as_json=False, deployment=None
    ):
        return pgfeed.rows(
            after,
            below=below,
            limit=limit,
            op_types=op_types,
            namespaces=namespaces,
            as_json=as_json,
            deployment=deployment,
        )

    def change_head(self, below):
        return pgfeed.head(below)

    def position_issued(self, after, below) -> bool:
        # Released positions are below the (non-decreasing) horizon when they are handed out.
        return after.txid < below
