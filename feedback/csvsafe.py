"""Spreadsheet-safe CSV cells (OWASP "CSV injection").

A spreadsheet opening an export runs a text cell that starts with ``=``, ``+``, ``-`` or ``@``
(or a tab or carriage return before one) as a formula. Such text cells get a leading single
quote, which spreadsheets show as text and do not evaluate. Only text is touched: numbers stay
numbers, so a negative confidence or utility still reads as a number. Pure: no Django import.
"""

from __future__ import annotations

from collections.abc import Iterable

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> object:
    """``value`` as written to a CSV: text that a spreadsheet would evaluate, quoted."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def row(values: Iterable[object]) -> list[object]:
    return [cell(value) for value in values]
