"""Text normalisation, the first stage of the response analysis: one spelling for quotes,
accents, short years and quantities (``analysis.text``), then the concept words of the lexicon
(``analysis.concepts``). ``normalise(text)`` is what the tokeniser reads.

Pure module: stdlib only, no Django import, deterministic.
"""

from __future__ import annotations

import re
import unicodedata

from analysis.concepts import _concepts
from analysis.text import _normalise_numbers
from analysis.words import COMBINING_RE, THOUSANDS_RE

# A year written with an apostrophe: "born in '19" is 2019, "since '98" 1998 (not "'19'", a
# quoted string, nor "'90s", a decade).
_SHORT_YEAR_RE = re.compile(r"(?<![\w'])'(\d\d)\b(?!['\w.])")


def _short_year(match: re.Match) -> str:
    year = int(match.group(1))
    return str(2000 + year if year < 40 else 1900 + year)


def normalise(text: str, concepts: bool = True) -> str:
    text = text.replace("’", "'").replace("‘", "'").replace("×", "x")
    if "'" in text:
        text = _SHORT_YEAR_RE.sub(_short_year, text)
    if not text.isascii():  # "Keflavík" and "Keflavik" are the same word
        text = COMBINING_RE.sub("", unicodedata.normalize("NFKD", text))
    text = _normalise_numbers(THOUSANDS_RE.sub("", text))  # 1,150 -> 1150
    return _concepts(text) if concepts else text
