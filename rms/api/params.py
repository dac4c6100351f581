"""Path and query parameters shared by the API views of every app: parsed here once, so a bad
value is the same 400 (or 404 for an id in the path) wherever it is sent."""

from __future__ import annotations

import uuid
from datetime import datetime

from rest_framework.exceptions import ValidationError

from rms import selectors
from rms.api import parsers
from rms.errors import NotFound
from rms.models import Namespace


def parse_uuid(value: str) -> uuid.UUID:
    """A malformed id in the path is a 404 (API.md)."""
    try:
        return uuid.UUID(str(value))
    except ValueError as exc:
        raise NotFound("No such object.") from exc


def parse_time_param(request, name: str, *, required: bool = False) -> datetime | None:
    """``?name=`` as an aware UTC time (a "+" the query string turned into a space restored);
    400 when it is not ISO 8601, its offset is 16 h or more, or it leaves years 1–9999 in UTC."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if required:
            raise ValidationError({name: ["This parameter is required."]})
        return None
    try:
        return parsers.parse_time(raw.replace(" ", "+"))
    except ValueError as exc:
        raise ValidationError({name: [str(exc)]}) from exc


def namespace_param(request, *, required: bool = True) -> Namespace | None:
    """The ``?namespace=`` a caller may read: 400 missing, 403 not theirs, 404 unknown."""
    name = request.query_params.get("namespace")
    if not name:
        if required:
            raise ValidationError({"namespace": ["This parameter is required."]})
        return None
    return selectors.namespace_readable(request.auth, name)
