"""Keyset pagination: ``{"results": [...], "next": url|null}`` (API.md).

The cursor encodes the last row's ordering key, so a page is one indexed range scan however deep
the client pages, and rows inserted meanwhile are neither skipped nor repeated.
"""

from __future__ import annotations

import base64
import json

from rest_framework.exceptions import ValidationError

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
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))
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
