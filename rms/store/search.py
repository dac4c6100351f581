"""The indexes that serve object listings' text search (``q``: ``content__icontains``).

Django writes a case-insensitive substring filter as ``UPPER(content::text) LIKE UPPER(%s)``;
on PostgreSQL a trigram GIN index on that same expression (``pg_trgm``'s ``gin_trgm_ops``)
answers it for any pattern of three characters or more, instead of a sequential scan of every
object. The query stays the portable ``icontains``: only the index is PostgreSQL's, created by
migration ``rms/0010`` from the statements here, and a no-op on every other database.

``pg_trgm`` ships with PostgreSQL and is a trusted extension (PostgreSQL 13+: a database owner
may create it); a server where it cannot be created keeps the sequential scan, which answers the
same rows, and the migration says so rather than failing.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction

log = logging.getLogger(__name__)

CONTENT_TRIGRAM_INDEX = "obj_content_trgm"


def create_content_trigram_index(schema_editor) -> bool:
    """Create ``pg_trgm`` and the content trigram index on PostgreSQL (in a savepoint, so a
    refused extension leaves the migration's transaction usable). Returns whether it exists."""
    if schema_editor.connection.vendor != "postgresql":
        return False
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {CONTENT_TRIGRAM_INDEX} ON rms_memoryobject "
                "USING gin ((UPPER(content)) gin_trgm_ops)"
            )
    except DatabaseError as exc:
        log.warning("no trigram index on object content (text search scans): %s", exc)
        return False
    return True


def drop_content_trigram_index(schema_editor) -> None:
    """The reverse: the index only (the extension may serve others)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {CONTENT_TRIGRAM_INDEX}")
