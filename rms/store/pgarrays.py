"""Columns of values as PostgreSQL binary arrays, built with C-level iteration.

``rms.store.pg`` sends a pipelined write as one array parameter per column. psycopg dumps a list in
binary with a Python loop over its elements (~0.3 µs each); a batch of feedback sessions sends
about 300,000 of them. Here a column whose values share one simple type (str, UUID, float, int,
or bool, with or without None) is encoded by ``map`` and ``bytes.join`` over C
functions into the bytes of PostgreSQL's ``array_send`` format, and handed to psycopg as an
already dumped parameter. Anything else (datetimes, whose C dumper psycopg already has; mixed
types) is returned unchanged for psycopg to dump.

Binary array format: int32 ndim, int32 has-null flag, uint32 element type oid, then per
dimension int32 size and int32 lower bound (1), then per element an int32 byte length (-1 for
NULL) followed by the element's binary form.
"""

from __future__ import annotations

import struct
import uuid
from functools import partial
from itertools import chain, repeat
from operator import attrgetter

from psycopg import adapt, pq

_HEADER = struct.Struct("!iiIii").pack
_LENGTH = struct.Struct("!i").pack
_NULL = _LENGTH(-1)
_FLOAT8 = partial(struct.Struct("!id").pack, 8)
_INT8 = partial(struct.Struct("!iq").pack, 8)
_BOOL = partial(struct.Struct("!i?").pack, 1)
_UUID_LENGTH = _LENGTH(16)
_uuid_int = attrgetter("int")
_uuid_bytes = partial(int.to_bytes, length=16, byteorder="big")
_NONE = type(None)


class Array(bytes):
    """An array parameter already in binary form; subclasses name its element type."""

    element_oid = 0


class _Dumper(adapt.Dumper):
    """Sends an ``Array`` as it is; subclasses name the array type."""

    format = pq.Format.BINARY

    def dump(self, obj):
        return obj


#: (class, dumper) pairs; ``register`` adds them to a cursor's or connection's adapters.
DUMPERS: list[tuple[type[Array], type[adapt.Dumper]]] = []


def _array_type(name: str, element_oid: int, array_oid: int) -> type[Array]:
    cls = type(name, (Array,), {"element_oid": element_oid})
    DUMPERS.append((cls, type(f"{name}Dumper", (_Dumper,), {"oid": array_oid})))
    return cls


TextArray = _array_type("TextArray", 25, 1009)
UuidArray = _array_type("UuidArray", 2950, 2951)
Float8Array = _array_type("Float8Array", 701, 1022)
Int8Array = _array_type("Int8Array", 20, 1016)
BoolArray = _array_type("BoolArray", 16, 1000)


def register(context) -> None:
    """Let ``context`` (a psycopg cursor or connection) send the arrays of this module."""
    for cls, dumper in DUMPERS:
        context.adapters.register_dumper(cls, dumper)


def _texts(values: list) -> bytes:
    data = list(map(str.encode, values))
    return b"".join(chain.from_iterable(zip(map(_LENGTH, map(len, data)), data, strict=True)))


def _text(value: str) -> bytes:
    data = value.encode()
    return _LENGTH(len(data)) + data


def _uuids(values: list) -> bytes:
    data = map(_uuid_bytes, map(_uuid_int, values))
    return b"".join(chain.from_iterable(zip(repeat(_UUID_LENGTH), data)))  # noqa: B905


#: type → (array class, all values' elements joined, one value's element)
_ELEMENTS = {
    str: (TextArray, _texts, _text),
    uuid.UUID: (UuidArray, _uuids, lambda v: _UUID_LENGTH + v.bytes),
    float: (Float8Array, lambda values: b"".join(map(_FLOAT8, values)), _FLOAT8),
    int: (Int8Array, lambda values: b"".join(map(_INT8, values)), _INT8),
    bool: (BoolArray, lambda values: b"".join(map(_BOOL, values)), _BOOL),
}


def encode(values: list):
    """``values`` as a binary array parameter, or ``values`` itself when they are not of one
    supported type (psycopg then dumps the list)."""
    kinds = set(map(type, values))
    has_null = _NONE in kinds
    kinds.discard(_NONE)
    if len(kinds) != 1:
        return values  # empty, all None or mixed: psycopg's own dumping
    kind = kinds.pop()
    found = _ELEMENTS.get(kind)
    if found is None:
        return values
    cls, joined, element = found
    present = [v for v in values if v is not None] if has_null else values
    try:
        if has_null:
            pieces = map(element, present)
            data = b"".join([_NULL if v is None else next(pieces) for v in values])
        else:
            data = joined(values)
    except struct.error:  # an int beyond int8
        return values
    return cls(_HEADER(1, int(has_null), cls.element_oid, len(values), 1) + data)
