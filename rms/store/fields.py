"""Model fields whose column type depends on the database (STYLE §15: only ``rms.store`` knows).

``HashField``: a SHA-256 digest. Python sees its 64 lowercase hex characters everywhere (the
hashed rows, the API, comparisons, archives); PostgreSQL stores the 32 bytes as ``bytea`` (33
bytes on disk instead of 65: the operation log keeps two per row); other databases keep the hex
text. ``rms.store.pg`` writes it through COPY and arrays as ``\\x``-prefixed hex (bytea's text
input), and ``rms.store.pg.hash_columns_to_bytes`` converts an existing text column in place.
"""

from __future__ import annotations

from django.db import models

HEX_DIGITS = 64


class HashField(models.CharField):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("max_length", HEX_DIGITS)
        super().__init__(*args, **kwargs)

    def db_type(self, connection):
        if connection.vendor == "postgresql":
            return "bytea"
        return super().db_type(connection)

    def get_db_prep_value(self, value, connection, prepared=False):
        value = super().get_db_prep_value(value, connection, prepared)
        if value is None or connection.vendor != "postgresql":
            return value
        # A value that is not 64 hex digits cannot be a stored hash: refused here, clearly,
        # rather than stored as some other bytes.
        return bytes.fromhex(value) if len(value) == HEX_DIGITS else _refuse(value)

    def from_db_value(self, value, expression, connection):
        if isinstance(value, bytes | memoryview):
            return bytes(value).hex()
        return value


def _refuse(value):
    raise ValueError(f"not a SHA-256 hex digest: {value!r}")


def hash_columns_to_bytes(schema_editor, table: str, columns: list[str]) -> None:
    """Migrate existing hex-text hash columns to ``HashField``'s bytea on PostgreSQL, in place
    (``decode(…, 'hex')``: the same digests, so every chain still verifies); elsewhere the
    column type does not change."""
    _alter(schema_editor, table, columns, "bytea USING decode({c}, 'hex')")


def hash_columns_to_text(schema_editor, table: str, columns: list[str]) -> None:
    """The reverse of ``hash_columns_to_bytes``."""
    _alter(schema_editor, table, columns, f"varchar({HEX_DIGITS}) USING encode({{c}}, 'hex')")


def _alter(schema_editor, table: str, columns: list[str], type_using: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    changes = ", ".join(
        f"ALTER COLUMN {quote(c)} TYPE {type_using.format(c=quote(c))}" for c in columns
    )
    schema_editor.execute(f"ALTER TABLE {quote(table)} {changes}")
