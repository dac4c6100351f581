"""Reading model rows in one round trip on PostgreSQL (the ingestion hot path's loads).

Django compiles every queryset (a few hundred microseconds each) and sends one query per round
trip. A write that must first read its idempotency records, namespaces, locked objects with their
aggregates and session tallies pays that several times per request. Here the queries are plain SQL
texts (constant, so psycopg parses each once), sent together through libpq's pipeline mode, and the
rows become model instances without ``Model.__init__`` (values converted with each field's own
``from_db_value``, as Django would).

Used by ``rms.store.pg`` only: every other module reads through the store (``rms.store``).
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from django.db import connection
from django.db.models.base import ModelState
from psycopg.types.datetime import TimestamptzLoader

from rms.store import pgarrays


def columns(model, alias: str) -> tuple[str, list]:
    """(``alias.col, …`` for every concrete field, the fields)."""
    fields = list(model._meta.concrete_fields)
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(f.column)}" for f in fields), fields


def _converters(fields) -> list:
    return [
        (f.from_db_value if hasattr(f, "from_db_value") else None)
        for f in fields  # JSONField parses its text here
    ]


class Rows:
    """Builds instances of ``model`` from a slice of each result row."""

    def __init__(self, model, fields) -> None:
        self.model = model
        self.attnames = [f.attname for f in fields]
        self.converters = _converters(fields)
        self.db = connection.alias

    def build(self, values: Sequence):
        obj = self.model.__new__(self.model)
        state = obj._state = ModelState()
        state.adding = False
        state.db = self.db
        d = obj.__dict__
        for name, convert, value in zip(self.attnames, self.converters, values, strict=True):
            d[name] = (
                value if convert is None or value is None else convert(value, None, connection)
            )
        return obj


class Select:
    """A SELECT of every concrete column of ``model`` (as ``alias``) where ``condition`` holds,
    and how its rows become instances. ``query`` is what :func:`rows` and :func:`pipelined`
    take; :meth:`build` turns the rows they return into instances; :meth:`run` does both."""

    def __init__(self, model, alias: str, condition: str, params: Sequence, tail: str = "") -> None:
        cols, fields = columns(model, alias)
        table = connection.ops.quote_name(model._meta.db_table)
        self.query = (f"SELECT {cols} FROM {table} {alias} WHERE {condition}{tail}", list(params))
        self._rows = Rows(model, fields)

    def build(self, found: Sequence[Sequence]) -> list:
        return [self._rows.build(row) for row in found]

    def run(self) -> list:
        return self.build(rows(*self.query))


def cursor(raw: psycopg.Connection) -> psycopg.Cursor:
    """A plain psycopg cursor on Django's connection (server-side binding, which binary
    parameters and pipeline mode need) that sends ``rms.store.pgarrays`` arrays and reads
    ``timestamptz`` with psycopg's C loader.

    Django registers a Python subclass of psycopg's loader so that every datetime carries its
    ``connection.timezone``; psycopg then cannot use its C version, and reading a timestamp costs
    about 4 µs instead of 0.5 (a batch load reads tens of thousands). The C loader returns the
    same instant in the session's time zone, which Django sets to ``TIME_ZONE`` (UTC here:
    ``datetime.timezone.utc``, as Django's own loader gives; ``tests/rms/test_fetch.py``).
    """
    cur = psycopg.Cursor(raw)
    cur.adapters.register_loader("timestamptz", TimestamptzLoader)
    pgarrays.register(cur)
    return cur


def rows(sql: str, params: Sequence) -> list[tuple]:
    """One query's rows (server-side binding, constant SQL text: parsed once by psycopg)."""
    connection.ensure_connection()
    with connection.wrap_database_errors, cursor(connection.connection) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def pipelined(queries: Sequence[tuple[str, Sequence]]) -> list[list[tuple]]:
    """Run the queries in order in one round trip; their rows, in order.

    The server runs them one after the other, each seeing what the ones before did (a lock taken
    by one holds for the next). Errors are Django's (IntegrityError, OperationalError...).
    """
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors:
        cursors = [cursor(raw) for _ in queries]
        try:
            with raw.pipeline():
                for cur, (sql, params) in zip(cursors, queries, strict=True):
                    cur.execute(sql, params)
            return [cur.fetchall() for cur in cursors]
        finally:
            for cur in cursors:
                cur.close()
