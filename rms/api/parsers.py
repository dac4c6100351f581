"""Strict JSON request bodies (API.md: a 400, never a 500, for anything a client can send).

Python's ``json`` accepts what the contract refuses and fails on what it should answer:

- a number that overflows (``1e400``) silently becomes ``inf``, which the body hash then refuses;
- a key repeated in one object is accepted, the last one winning;
- ~1,000 levels of nesting raise ``RecursionError`` (in the parser, or later in the hash, the
  serializers or the error renderer).

``loads`` refuses all three at parse time. The depth is checked on the raw text before the
parser runs (the parser's own limit is whatever stack the request has left), with C-speed
string operations: the hot batch endpoint pays about a millisecond per megabyte.

A view that takes a JSON list of independent items (``parse_items = True``, the session batch)
gets the items one by one when the list as a whole has a bad item: each bad item becomes a
``BadItem`` that the view answers with its own 400, so one item never sinks the others.
"""

from __future__ import annotations

import codecs
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from rms.jsondepth import MAX_DEPTH, nesting_depth


class JSONInputError(ValueError):
    """Well-formed JSON the contract refuses (non-finite number, duplicate key, too deep)."""


class TooDeep(JSONInputError):
    """Nested deeper than MAX_DEPTH: refused for the whole body, never item by item."""


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONInputError(f"The number {text[:40]} is out of range (not finite).")
    return value


def _constant(name: str):
    raise JSONInputError(f"{name} is not a JSON number.")


def _object(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JSONInputError(f"The key {key[:100]!r} appears twice in one object.")
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(
    parse_float=_float, parse_constant=_constant, object_pairs_hook=_object, strict=True
)
#: Only finds where each item of a list ends; every item is then decoded by _DECODER.
_LENIENT = json.JSONDecoder(strict=False)


def _check_depth(text: str) -> None:
    if nesting_depth(text) > MAX_DEPTH:
        raise TooDeep(f"The JSON is nested more than {MAX_DEPTH} levels deep.")


def loads(text: str) -> Any:
    """Parse ``text`` strictly; ValueError (JSONInputError for the contract's refusals)."""
    _check_depth(text)
    try:
        return _DECODER.decode(text)
    except RecursionError as exc:  # not reached after _check_depth; kept as a last guard
        raise TooDeep("The JSON is nested too deeply.") from exc


@dataclass(frozen=True)
class BadItem:
    """An item of a list body that could not be accepted; ``message`` says why."""

    message: str
    text: str


def loads_items(text: str) -> list:
    """A top-level JSON list whose items are decoded one by one: an item the strict decoder
    refuses becomes a BadItem. Raises ValueError when ``text`` is not a well-formed list."""
    _check_depth(text)
    end = len(text)
    pos = _skip(text, 0)
    if pos >= end or text[pos] != "[":
        raise ValueError("Expected a JSON list.")
    items: list = []
    pos = _skip(text, pos + 1)
    if pos < end and text[pos] == "]":
        return _tail(text, pos + 1, items)
    while True:
        _, stop = _LENIENT.raw_decode(text, pos)
        piece = text[pos:stop]
        try:
            items.append(_DECODER.decode(piece))
        except JSONInputError as exc:
            items.append(BadItem(str(exc), piece))
        pos = _skip(text, stop)
        if pos < end and text[pos] == ",":
            pos = _skip(text, pos + 1)
            continue
        if pos < end and text[pos] == "]":
            return _tail(text, pos + 1, items)
        raise ValueError(f"Expected ',' or ']' at character {pos}.")


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos


def _tail(text: str, pos: int, items: list) -> list:
    if _skip(text, pos) != len(text):
        raise ValueError(f"Extra data at character {pos}.")
    return items


class StrictJSONParser(BaseParser):
    """DRF's JSON parser with ``loads``; a view with ``parse_items = True`` gets BadItems."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(f"The body is not valid {encoding} text.") from exc
        try:
            return loads(text)
        except RecursionError as exc:
            raise ParseError("The JSON is nested too deeply.") from exc
        except JSONInputError as exc:
            view = parser_context.get("view")
            if not getattr(view, "parse_items", False) or isinstance(exc, TooDeep):
                raise ParseError(str(exc)) from exc
            try:
                return loads_items(text)
            except ValueError as list_exc:
                raise ParseError(str(exc)) from list_exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc


# --- times -------------------------------------------------------------------------------------

#: Exclusive bound on a UTC offset: PostgreSQL's timestamptz takes at most ±15:59, and no real
#: zone is beyond ±14:00.
MAX_UTC_OFFSET = timedelta(hours=16)


def to_utc(value: datetime) -> datetime:
    """``value`` in UTC (a naive time is taken as UTC). ValueError when its offset is 16 h or
    more, or when the UTC time falls outside years 1–9999."""
    if value.tzinfo is None or value.utcoffset() is None:
        return value.replace(tzinfo=UTC)
    if abs(value.utcoffset()) >= MAX_UTC_OFFSET:
        raise ValueError("The UTC offset must be less than 16 hours.")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("The time is out of range (years 1 to 9999 in UTC).") from None


def parse_time(raw: str) -> datetime:
    """An ISO 8601 date-time as an aware UTC datetime; ValueError with the reason otherwise."""
    try:
        value = parse_datetime(raw)
    except (ValueError, TypeError):
        value = None
    if value is None:
        raise ValueError("Must be an ISO 8601 date-time.")
    return to_utc(value)
