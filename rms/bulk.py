"""Fast bulk writes for the ingestion path (STYLE §5: large passes in bounded batches).

On PostgreSQL, inserts stream through ``COPY`` and updates go through a temporary table filled by
``COPY`` and one ``UPDATE … FROM``: both cost about one round trip per call instead of Django's
per-row SQL compilation (its ``bulk_update`` builds a CASE expression per field and row). On
SQLite, ``executemany`` of plain statements is already fast. Rows keep their list order, so an
auto-increment column (``Operation.seq``) numbers them in that order.

Values are prepared with each field's own ``get_db_prep_save``, exactly as Django would.
"""

from __future__ import annotations

import itertools
import json

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

_temp_ids = itertools.count()
#: Up to this many rows an update is one UPDATE … FROM (VALUES …); above, COPY into a temp table.
SMALL_UPDATE = 50


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


def _prepared(objs, fields) -> list[list]:
    """Rows of driver values; a JSON column uses the text already encoded for it, if any
    (``_json_<attname>``, set by ``rms.oplog.append``)."""
    attnames = [f.attname for f in fields]
    preparers = _preparers(fields)
    postgres = connection.vendor == "postgresql"
    cached = [
        f"_json_{f.attname}" if postgres and isinstance(f, models.JSONField) else None
        for f in fields
    ]
    rows = []
    for obj in objs:
        values = obj.__dict__
        row = []
        for attname, prepare, key in zip(attnames, preparers, cached, strict=True):
            if key is not None and key in values:
                row.append(values[key])
            elif prepare is None:
                row.append(values[attname])
            else:
                row.append(prepare(values[attname]))
        rows.append(row)
    return rows


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def insert(model, objs: list) -> None:
    """INSERT every object (without reading back generated keys)."""
    if not objs:
        return
    fields = _insert_fields(model)
    table = _q(model._meta.db_table)
    columns = ", ".join(_q(f.column) for f in fields)
    rows = _prepared(objs, fields)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
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
    pk = meta.pk
    fields = [meta.get_field(name) for name in field_names]
    table = _q(meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and len(objs) <= SMALL_UPDATE:
            # A few rows (a single signal's object, aggregate and tally): one statement, instead
            # of a temp table whose create/drop also churns the system catalogs on every write.
            all_fields = [pk, *fields]
            casts = ", ".join(f"%s::{f.db_type(connection)}" for f in all_fields)
            names = ", ".join(_q(f.column) for f in all_fields)
            assignments = ", ".join(f"{_q(f.column)} = v.{_q(f.column)}" for f in fields)
            values = ", ".join([f"({casts})"] * len(objs))
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM (VALUES {values}) AS v({names}) "
                f"WHERE {table}.{_q(pk.column)} = v.{_q(pk.column)}",
                [value for row in _prepared(objs, all_fields) for value in row],
            )
        elif connection.vendor == "postgresql":
            temp = _q(f"_bulk_{meta.db_table}_{next(_temp_ids)}")
            all_fields = [pk, *fields]
            columns = ", ".join(_q(f.column) for f in all_fields)
            definition = ", ".join(f"{_q(f.column)} {f.db_type(connection)}" for f in all_fields)
            cursor.execute(f"CREATE TEMP TABLE {temp} ({definition}) ON COMMIT DROP")
            with (
                connection.wrap_database_errors,
                cursor.cursor.copy(f"COPY {temp} ({columns}) FROM STDIN") as copy,
            ):
                for row in _prepared(objs, all_fields):
                    copy.write_row(row)
            assignments = ", ".join(f"{_q(f.column)} = v.{_q(f.column)}" for f in fields)
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM {temp} v "
                f"WHERE {table}.{_q(pk.column)} = v.{_q(pk.column)}"
            )
            cursor.execute(f"DROP TABLE {temp}")
        else:
            assignments = ", ".join(f"{_q(f.column)} = %s" for f in fields)
            rows = [row[1:] + row[:1] for row in _prepared(objs, [pk, *fields])]
            cursor.executemany(f"UPDATE {table} SET {assignments} WHERE {_q(pk.column)} = %s", rows)
