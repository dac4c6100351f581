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


def created_at_page(request, qs, *, newest_first: bool = False) -> tuple[list, str | None]:
    """One page of ``qs`` in (created_at, id) order and the URL of the next page.

    The cursor is the last row's (created_at, id); ties on created_at fall back to the id.
    """
    size = page_size(request)
    cursor = decode_cursor(request)
    if cursor is not None:
        try:
            created_at = parsers.to_utc(datetime.fromisoformat(cursor[0]))
            last_id = uuid.UUID(cursor[1])
        except (IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ValidationError({"cursor": ["Invalid cursor."]}) from exc
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
