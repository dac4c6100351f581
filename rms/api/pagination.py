"""Keyset pagination: ``{"results": [...], "next": url|null}`` (API.md).

The cursor encodes the last row's ordering key, so a page is one indexed range scan however deep
the client pages, and rows inserted meanwhile are neither skipped nor repeated.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import datetime

from django.db.models import Q
from rest_framework.exceptions import ValidationError

from rms.api import parsers

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: Exclusive bound on a sequence number in a cursor: the log's ``seq`` is a PostgreSQL bigint,
#: and a larger number reaching the database is a ``bigint out of range`` error, not a 400.
MAX_SEQ = 2**63
#: Exclusive bound on an offset cursor: far deeper than any page a client reaches, and within
#: what both databases take as an OFFSET.
MAX_OFFSET = 2**31


def invalid_cursor() -> ValidationError:
    return ValidationError({"cursor": ["Invalid cursor."]})


def cursor_int(value, bound: int) -> int:
    """A whole number ``0 <= value < bound`` from a decoded cursor; a 400 for anything else
    (a float, a bool, a negative or huge number a client forged)."""
    if type(value) is not int or not 0 <= value < bound:
        raise invalid_cursor()
    return value


def cursor_time(value) -> datetime:
    """An ISO time from a decoded cursor, in UTC; a 400 when it is not one or is out of range."""
    if not isinstance(value, str):
        raise invalid_cursor()
    try:
        return parsers.to_utc(datetime.fromisoformat(value))
    except ValueError as exc:
        raise invalid_cursor() from exc


def offset_cursor(request) -> int:
    """The offset of an offset cursor ``[n]`` (0 without one), bounded by MAX_OFFSET."""
    cursor = decode_cursor(request)
    if cursor is None:
        return 0
    if len(cursor) != 1:
        raise invalid_cursor()
    return cursor_int(cursor[0], MAX_OFFSET)


def page_size(request) -> int:
    raw = request.query_params.get("page_size")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    try:
        size = int(raw)
    except ValueError as exc:
        raise ValidationError({"page_size": ["Must be an integer."]}) from exc
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ValidationError({"page_size": [f"Must be between 1 and {MAX_PAGE_SIZE}."]})
    return size


def encode_cursor(values: list) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def decode_cursor(request) -> list | None:
    raw = request.query_params.get("cursor")
    if not raw:
        return None
    try:
        padded = raw + "=" * (-len(raw) % 4)
        values = parsers.loads(base64.urlsafe_b64decode(padded.encode()).decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError({"cursor": ["Invalid cursor."]}) from exc
    if not isinstance(values, list):
        raise ValidationError({"cursor": ["Invalid cursor."]})
    return values


def next_url(request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    params = request.query_params.copy()
    params["cursor"] = cursor
    return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")


def keyset_cursor(cursor: list) -> tuple[datetime, uuid.UUID]:
    """A ``[time ISO, id]`` cursor, checked; a 400 when it is anything else."""
    if len(cursor) != 2 or not isinstance(cursor[1], str):
        raise invalid_cursor()
    try:
        last_id = uuid.UUID(cursor[1])
    except ValueError as exc:
        raise invalid_cursor() from exc
    return cursor_time(cursor[0]), last_id


def created_at_page(request, qs, *, newest_first: bool = False) -> tuple[list, str | None]:
    """One page of ``qs`` in (created_at, id) order and the URL of the next page.

    The cursor is the last row's (created_at, id); ties on created_at fall back to the id.
    """
    size = page_size(request)
    cursor = decode_cursor(request)
    if cursor is not None:
        created_at, last_id = keyset_cursor(cursor)
        if newest_first:
            after = Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=last_id)
        else:
            after = Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=last_id)
        qs = qs.filter(after)
    order = ("-created_at", "-id") if newest_first else ("created_at", "id")
    rows = list(qs.order_by(*order)[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    last = encode_cursor([rows[-1].created_at.isoformat(), str(rows[-1].pk)]) if more else None
    return rows, next_url(request, last)


def offset_page(request, qs) -> tuple[list, str | None]:
    """One page of an ordered ``qs`` by offset (``[n]`` cursor): for orders on columns that
    are not unique keys (confidence, usage ratio), where a keyset needs every tie-break."""
    size = page_size(request)
    start = offset_cursor(request)
    rows = list(qs[start : start + size + 1])
    more = len(rows) > size
    return rows[:size], next_url(request, encode_cursor([start + size]) if more else None)
