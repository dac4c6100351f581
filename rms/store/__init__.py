"""The storage layer: the only code that knows which database it runs on (STYLE §15).

``get()`` is the store of the default connection: ``rms.store.pg.PostgresStore`` on PostgreSQL
(one round trip per load, binary arrays, COPY, pipelines), ``rms.store.portable.PortableStore``
elsewhere (Django's ORM and its own value preparation). Both implement ``rms.store.base.Store``
and pass one contract suite (``tests/rms/test_store_contract.py``). Callers describe what they
read (``Select``) and hand over rows; they never ask which database they are on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import connection

if TYPE_CHECKING:
    from rms.store.base import Select, Store, attach_namespaces

__all__ = [
    "Select",
    "Store",
    "attach_namespaces",
    "forget_overwritten",
    "get",
    "portable_store",
    "postgres_store",
]

_stores: dict[str, Store] = {}


def __getattr__(name: str):
    # ``rms.store.base`` reads the models, and ``rms.models`` reads ``rms.store.fields``: the
    # package itself imports neither, so the models can load their field types from here.
    if name in ("Select", "Store", "attach_namespaces"):
        from rms.store import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def postgres_store() -> Store:
    store = _stores.get("postgresql")
    if store is None:
        from rms.store.pg import PostgresStore  # imports psycopg's C pieces: only when used

        store = _stores["postgresql"] = PostgresStore()
    return store


def portable_store() -> Store:
    store = _stores.get("portable")
    if store is None:
        from rms.store.portable import PortableStore

        store = _stores["portable"] = PortableStore()
    return store


def get() -> Store:
    """The store for the default database: the one place that reads its vendor."""
    return postgres_store() if connection.vendor == "postgresql" else portable_store()


def forget_overwritten() -> None:
    """After an erasure commits, let no overwritten bytes linger in the database's files.

    SQLite: rows are rewritten with ``secure_delete`` on (settings), so freed cells are zeroed;
    the write-ahead log still holds the old pages until a checkpoint, which this forces and
    truncates. PostgreSQL: old row versions are dead tuples, never dumped, and reclaimed by
    autovacuum; nothing to do here (a VACUUM cannot run inside the caller's transaction).
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
