"""How deeply a JSON text nests, measured without parsing it (pure: standard library only).

Python's json module recurses once per level, so about a thousand levels of nesting raise
``RecursionError`` deep inside a request; every JSON body is measured first and refused when it
nests deeper than :data:`MAX_DEPTH`. Used by the API's parser and by the OTLP/JSON decoder."""

from __future__ import annotations

import re

#: No body of the contract nests deeper than a handful of levels.
MAX_DEPTH = 64

_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
#: Every byte but the brackets and the quote: deleted before the depth is measured.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_OPEN_CLOSE = bytes.maketrans(b"{}", b"[]")


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of arrays and objects in ``text`` (JSON), or ``limit + 1`` when it is
    deeper than ``limit``. UTF-8 never puts an ASCII byte inside a multi-byte character, so the
    structure can be read from the encoded bytes with C-speed byte operations."""
    if len(text) <= limit:
        return len(text)  # an upper bound is enough
    data = text.encode("utf-8", "surrogatepass")
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)  # an escaped quote must not end a string
    data = data.translate(_OPEN_CLOSE, _NOT_STRUCTURE)
    # Brackets inside strings are text. A bracket is inside one when an odd number of quotes
    # precedes it; dropping two adjacent quotes keeps every parity, and leaves few strings.
    data = data.replace(b'""', b"")
    if b'"' in data:
        data = _STRING.sub(b"", data)
    # Each pass removes the innermost pairs, so a pass count is the depth.
    depth = 0
    while data and depth <= limit:
        shorter = data.replace(b"[]", b"")
        if len(shorter) == len(data):
            # Unbalanced (the parser will refuse it): the unclosed brackets bound the depth.
            return depth + data.count(b"[")
        data, depth = shorter, depth + 1
    return depth
