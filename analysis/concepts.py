"""The concept stage of text normalisation: synonyms, the concept lexicon
(``analysis/data/detection_lexicon.txt``) and the WordNet related-word table
(``analysis/data/detection_wordnet.txt``). After a phrase of the lexicon, a date, a spoken time or
a duration, its other wording is written as a marked alternative (``concepts``);
``related_table()`` is the related-word table the lexical scorer matches through.

Pure module: stdlib only, no Django import, deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from analysis.text import _ONES, _plain
from analysis.words import (
    HAS_DIGIT_RE,
    MONTHS_IN_ORDER,
    TOKEN_SPLIT_RE,
    UNIT_CANON,
    stem_of,
    word_set,
)

# --------------------------------------------------------------------------------------------
# Synonyms: a small, general English table, not derived from either labelled set.
# Each group is written to one key (its first word) before stemming.
# --------------------------------------------------------------------------------------------

_SYNONYM_GROUPS = (
    "car vehicle auto automobile",
    "doctor physician gp",
    "flat apartment",
    "film movie",
    "phone smartphone mobile cellphone",
    "holiday vacation",
    "trip journey",
    "bike bicycle",
    "purchase buy bought",
    "begin start started",
    "finish end",
    "fix repair",
    "large big",
    "small little tiny",
    "quick fast rapid",
    "cheap inexpensive affordable",
    "expensive pricey costly",
    "job position role",
    "medicine medication meds",
    "sick ill unwell",
    "allergy allergic",
    "child kid kids children",
    "mother mum mom",
    "father dad",
    "spouse wife husband",
    "home house",
    "email e-mail mail",
    "repo repository",
    "db database",
    "config configuration",
    "env environment",
    "k8s kubernetes",
    "postgres postgresql",
    "js javascript",
    "ts typescript",
    "docs documentation",
    "laptop notebook",
    "sofa couch",
    "trousers pants",
    "lorry truck",
    "petrol gasoline",
    "salary wage",
    "chips fries",
    "aeroplane airplane plane",
    "colour color",
    "favourite favorite",
    "centre center",
    "organisation organization",
    "deadline due",
    "vegetarian veggie",
)
SYNONYMS = {w: group.split()[0] for group in _SYNONYM_GROUPS for w in group.split()[1:]}


# --------------------------------------------------------------------------------------------
# Concept lexicon: analysis/data/detection_lexicon.txt, general English written by
# hand (its header explains the three kinds of line), and analysis/data/detection_wordnet.txt,
# related words derived from WordNet 3.0 by bench/build_wordnet_lexicon.py. Both ship inside
# the package; the first is read at import (it is small), the second on first use.
# --------------------------------------------------------------------------------------------

DATA_DIR = Path(__file__).resolve().parent / "data"
LEXICON_FILE = DATA_DIR / "detection_lexicon.txt"
WORDNET_FILE = DATA_DIR / "detection_wordnet.txt"

# A concept written after a phrase is marked (a private-use character before each of its
# words) so that the tokenizer knows it is an alternative wording: an optional memory term
# that stands for the phrase's own words (_Token.alt, _Token.covers). The mark holds the number
# of words of the phrase (n) and whether the concept keeps the negation in force there
# ("doesn't report to Dana" -> manager negated) or not, because its phrase holds the negation
# itself ("doesn't eat meat" -> vegetarian, asserted): chr(MARK_BASE + 2 n + absorb).
MARK_BASE = 0xE000
MARK_LOW, MARK_HIGH = chr(MARK_BASE), chr(MARK_BASE + 0xFF)
_ABSORB_RE = re.compile(r"n't\b|\b(?:not|never|no|without|non|cannot|free|less|quit|stopped)\b")


def _trie_pattern(words: Sequence[str]) -> str:
    """A regex matching any of `words`, as a trie (one branch per letter): far faster for the
    regex engine than a flat alternation."""
    root: dict = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        branches = [re.escape(ch) + emit(node[ch]) for ch in sorted(k for k in node if k)]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


def _read_lexicon(path: Path) -> tuple[list[list[str]], list[list[str]], list[tuple[str, str]]]:
    merges: list[list[str]] = []
    related: list[list[str]] = []
    phrases: list[tuple[str, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, _, body = line.partition(" ")
        if kind == "=":
            merges.append(body.split())
        elif kind == "~":
            related.append(body.split())
        elif kind == "^":
            general, *members = body.split()
            related.extend([general, m] for m in members)
        elif kind == ">":
            concept, _, alternatives = body.partition(":")
            for alt in alternatives.split(" | "):
                phrases.append((concept.strip(), alt.strip()))
    return merges, related, phrases


_LEX_MERGES, _LEX_RELATED, _LEX_PHRASES = _read_lexicon(LEXICON_FILE)
for _group in _LEX_MERGES:
    for _w in _group[1:]:
        SYNONYMS.setdefault(_w, _group[0])
# The table is read before stemming, so its plurals and third persons are written out too
# ("starts" is "start", which is "begin").
for _w, _canon in list(SYNONYMS.items()):
    if len(_w) >= 3 and _w.isalpha() and not _w.endswith("s"):
        SYNONYMS.setdefault(_w + "s", _canon)


def _expand_lead(alternative: str) -> list[str]:
    """A phrase that opens with a group, "(?:doesn't|does not) eat meat", as one phrase per
    option, so that every phrase opens with a literal word."""
    if not alternative.startswith("(?:"):
        return [alternative]
    close = alternative.index(")")
    options = alternative[3:close].split("|")
    rest = alternative[close + 1 :]
    if rest.startswith("?"):
        options.append("")
        rest = rest[1:]
    return [o + rest if o else rest.lstrip() for o in options]


def _literal_prefix(alternative: str) -> str:
    """The literal letters a phrase opens with ("report" for "reports? to", "in charge of")."""
    out = ""
    for i, ch in enumerate(alternative):
        if not (ch.isalnum() or ch in "'- "):
            break
        if alternative[i + 1 : i + 2] in ("?", "*", "{"):
            break
        out += ch
    return out.lower()


_KEY_LENGTH = 6


def _phrase_index(phrases: list[tuple[str, str]]) -> dict[str, tuple[re.Pattern, tuple[str, ...]]]:
    """Phrases by the (up to) six literal characters they open with: a regex per bucket with one
    group per phrase, and the phrases' concepts. Finding where a key starts (one trie regex) and
    trying only its buckets is much faster than one alternation of every phrase tried at every
    position."""
    buckets: dict[str, list[tuple[str, str]]] = {}
    for concept, alternative in phrases:
        for alt in _expand_lead(alternative):
            prefix = _literal_prefix(alt)
            if not prefix:
                raise ValueError(f"lexicon phrase without a literal first letter: {alt!r}")
            buckets.setdefault(prefix[:_KEY_LENGTH], []).append((concept, alt))
    index = {}
    for key, items in buckets.items():
        items.sort(key=lambda item: len(item[1]), reverse=True)
        pattern = "|".join(f"({alt})" for _, alt in items)
        index[key] = (
            re.compile(f"(?:{pattern})(?![\\w-])", re.IGNORECASE),
            tuple(c for c, _ in items),
        )
    return index


_PHRASE_INDEX = _phrase_index(_LEX_PHRASES)
# Where a phrase can start: a word that opens with one of the index's keys (a look-ahead, so
# that every start is seen), and for each key the buckets of it and of its shorter prefixes.
_PHRASE_START_RE = re.compile(r"(?<![\w-])(?=(" + _trie_pattern(sorted(_PHRASE_INDEX)) + "))")
_PHRASE_BUCKETS = {
    key: tuple(_PHRASE_INDEX[key[:n]] for n in range(len(key), 0, -1) if key[:n] in _PHRASE_INDEX)
    for key in _PHRASE_INDEX
}
# Durations in another unit: "2 hours" also reads "120 minutes", "14 days" "2 weeks".
_SMALL_NUMBERS = {
    **{w: n for w, n in _ONES.items() if w != "one"},
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
# The number starts where no digit, letter or point is before it (a look-behind, not a test
# after the match: without it, a long run of digits costs time quadratic in its length).
_UNIT_SWAP_RE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)[ -]((?i:second|minute|hour|day|week|month|year))(?i:s)?\b(?![-\w])"
)
# A spelled number before a unit or a scale, in one pass: "six months" also reads "0.5 years"
# (no: only whole or half units), "four hundred" is 400, "five thousand" 5000.
_SPELLED_WORDS = sorted([*_SMALL_NUMBERS, "a", "one"])
_SPELLED_RE = re.compile(
    r"("
    + _trie_pattern(sorted({*_SPELLED_WORDS, *(w.capitalize() for w in _SPELLED_WORDS)}))
    + r")(?: ((?i:hundred|thousand))\b(?![- ]and)"
    r"|[ -]((?i:second|minute|hour|day|week|month|year))(?i:s)?\b(?![-\w]))"
)
_UNIT_HINT_RE = re.compile(r"(?:second|minute|hour|day|week|month|year)", re.IGNORECASE)
# Other spellings of a date, a time of day or a duration, written after them as alternatives.
_MONTH_NUMBER = {m: i for i, m in enumerate(MONTHS_IN_ORDER, start=1)}
_MONTH_NAMES = tuple(m.capitalize() for m in MONTHS_IN_ORDER)
_MONTH_ALT = "|".join(MONTHS_IN_ORDER)
# "2 August 2027", "2nd of august"; "August 2, 2027" (a month name first is capitalised: a
# regex that opens with a letter class is much faster than one that ignores case).
_DATE_RE = re.compile(
    r"(\d{1,2})(?:st|nd|rd|th)?(?: of)? ((?i:" + _MONTH_ALT + r"))\b(?:,? (\d{4}))?\b"
)
_DATE_MONTH_FIRST_RE = re.compile(
    r"(" + _trie_pattern(_MONTH_NAMES) + r") (\d{1,2})(?:st|nd|rd|th)?\b(?:,? (\d{4}))?\b"
)
_CLOCK_WORDS = {**{w: n for w, n in _ONES.items()}, "ten": 10, "eleven": 11, "twelve": 12}
_CLOCK_WORD_RE = re.compile(
    r"([Hh]alf|[Qq]uarter)[- ]((?i:past|to))[- ](\d{1,2}|(?i:" + "|".join(_CLOCK_WORDS) + r"))\b"
)
_OCLOCK_RE = re.compile(r"\b(\d{1,2}|" + "|".join(_CLOCK_WORDS) + r") o'clock\b", re.IGNORECASE)
_SPOKEN_DURATIONS = {
    "half a year": "6 months",
    "a year and a half": "18 months",
    "half a day": "12 hours",
    "a fortnight": "2 weeks",
    "half a dozen": "6",
    "half a minute": "30 seconds",
    "half-minute": "30 seconds",
    "half a terabyte": "500 gb",
}
_SPOKEN_RE = re.compile(
    r"(?:[Hh]alf a (?:year|day|dozen|minute|terabyte)|[Hh]alf-minute"
    r"|[Aa] (?:year and a half|fortnight))\b"
)
# "3 hours 30 minutes" also reads "210 minutes" and "3.5 hours" (before the one-unit swaps,
# which write their own alternatives after "3 hours"). This pattern and the next start where no
# letter, digit or point is before the number (the look-behind _inside_word tests elsewhere).
_COMPOUND_DURATION_RE = re.compile(r"(?<![\w.])(\d+) hours?,? (?:and )?(\d{1,2}) minutes?\b")
# Storage sizes in the other decimal unit: "2 TB" also reads "2000 gb", "500 GB" "0.5 tb".
_DATA_SIZE_RE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?) ?((?i:tb|gb|terabytes?|gigabytes?))\b(?![-\w])"
)
# A metric quantity in the unit a thousand times larger or smaller: "3200 grams" also reads
# "3.2 kg", "1.5 km" "1500 meters", "250 ml" "0.25 liters" (a bare "m" or "l" is left alone).
_METRIC_UNITS = {  # each spelling of a unit -> (the other unit's word, factor to it)
    **dict.fromkeys(word_set("kg kilo kilos kilogram kilograms"), ("grams", 1000)),
    **dict.fromkeys(word_set("g gram grams"), ("kg", 0.001)),
    **dict.fromkeys(word_set("km kilometre kilometres kilometer kilometers"), ("meters", 1000)),
    **dict.fromkeys(word_set("metre metres meter meters"), ("km", 0.001)),
    **dict.fromkeys(word_set("litre litres liter liters"), ("ml", 1000)),
    **dict.fromkeys(
        word_set("ml millilitre millilitres milliliter milliliters"), ("liters", 0.001)
    ),
}
_METRIC_RE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?) ?((?i:"
    + "|".join(sorted(_METRIC_UNITS, key=len, reverse=True))
    + r"))\b(?![-\w])"
)


def _inside_word(match: re.Match, also: str = "") -> bool:
    """Whether a match starts inside a word (the regexes leave that test out: one that opens
    with a letter or digit class scans much faster than one that opens with a look-behind)."""
    i = match.start()
    if not i:
        return False
    before = match.string[i - 1]
    return before.isalnum() or before == "_" or before in also


def _date(match: re.Match) -> str:
    if _inside_word(match):
        return match.group(0)
    day, month, year = match.group(1), match.group(2), match.group(3)
    if not day.isdigit():
        day, month = month, day  # month first
    month = _MONTH_NUMBER[month.lower()]
    if not 1 <= int(day) <= 31:
        return match.group(0)
    iso = f"{month:02d}-{int(day):02d}"
    if year:
        iso = f"{year}-{iso}"
    return match.group(0) + _marked(iso, False, len(TOKEN_SPLIT_RE.findall(match.group(0))))


def _clock_words(match: re.Match) -> str:
    if _inside_word(match):
        return match.group(0)
    oclock = match.re is _OCLOCK_RE
    raw = match.group(1) if oclock else match.group(3)
    hour = int(raw) if raw.isdigit() else _CLOCK_WORDS[raw.lower()]
    if not 1 <= hour <= 12:
        return match.group(0)
    minute = 0
    if not oclock:
        minute = 30 if match.group(1).lower() == "half" else 15
        if match.group(2).lower() == "to":
            hour, minute = (hour - 1) or 12, 60 - minute
    n = len(TOKEN_SPLIT_RE.findall(match.group(0)))
    return match.group(0) + _marked(f"{hour:02d}:{minute:02d}", False, n)


def _spoken(match: re.Match) -> str:
    if _inside_word(match):
        return match.group(0)
    n = len(TOKEN_SPLIT_RE.findall(match.group(0)))
    return match.group(0) + _marked(_SPOKEN_DURATIONS[match.group(0).lower()], False, n)


_UNIT_SWAPS = {  # unit -> ((other unit, factor to it), ...)
    "second": (("minutes", 1 / 60),),
    "minute": (("hours", 1 / 60), ("seconds", 60)),
    "hour": (("minutes", 60), ("days", 1 / 24)),
    "day": (("weeks", 1 / 7), ("hours", 24)),
    "week": (("days", 7),),
    "month": (("years", 1 / 12),),
    "year": (("months", 12),),
}


def _marked(words: str, absorb: bool, covers: int) -> str:
    out = []
    for i, w in enumerate(words.split()):
        out.append(f" {chr(MARK_BASE + 2 * (covers if i == 0 else 0) + absorb)}{w}")
    return "".join(out) + " "


def _phrases(text: str) -> str:
    """The text with each lexicon phrase followed by its concept (marked)."""
    low = text.lower()
    out: list[str] = []
    last = 0
    buckets = _PHRASE_BUCKETS
    for m in _PHRASE_START_RE.finditer(low):
        pos = m.start()
        if pos < last:
            continue
        best = concept = None
        for bucket in buckets[m.group(1)]:
            hit = bucket[0].match(text, pos)
            if hit and (best is None or hit.end() > best.end()):
                best, concept = hit, bucket[1][hit.lastindex - 1]
        if best is None:
            continue
        phrase = best.group(0)
        absorb = _ABSORB_RE.search(phrase.lower()) is not None
        out.append(text[last : best.end()])
        out.append(_marked(concept, absorb, min(60, len(TOKEN_SPLIT_RE.findall(phrase)))))
        last = best.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _spelled(match: re.Match) -> str:
    if _inside_word(match):
        return match.group(0)
    raw = match.group(1).lower()
    if match.group(3):  # a unit: as _unit_swap, for "two".."twelve" only
        return _unit_swap(match) if raw in _SMALL_NUMBERS else match.group(0)
    value = 1 if raw in ("a", "one") else _SMALL_NUMBERS[raw]
    value *= 100 if match.group(2).lower() == "hundred" else 1000
    return match.group(0) + _marked(str(value), False, 2)


def _compound_duration(match: re.Match) -> str:
    hours, minutes = int(match.group(1)), int(match.group(2))
    if not 0 < minutes < 60:
        return match.group(0)
    total = 60 * hours + minutes
    out = match.group(0) + _marked(f"{total} minutes", False, 4)
    if (total * 4) % 60 == 0:  # whole quarters: 3.5 hours, 1.25 hours
        out += _marked(f"{_plain(total / 60)} hours", False, 4)
    return out


def _data_size(match: re.Match) -> str:
    value, unit = float(match.group(1)), match.group(2).lower()
    if unit.startswith("t"):
        return match.group(0) + _marked(f"{_plain(value * 1000)} gb", False, 2)
    if value >= 500 and value % 500 == 0:
        return match.group(0) + _marked(f"{_plain(value / 1000)} tb", False, 2)
    return match.group(0)


def _metric(match: re.Match) -> str:
    unit, factor = _METRIC_UNITS[match.group(2).lower()]
    other = float(match.group(1)) * factor
    if other < 0.01 or abs(other * 100 - round(other * 100)) > 1e-6:
        return match.group(0)
    return match.group(0) + _marked(f"{_plain(other)} {unit}", False, 2)


def _unit_swap(match: re.Match) -> str:
    if _inside_word(match, "."):
        return match.group(0)
    raw = match.group(1).lower()
    value = float(_SMALL_NUMBERS.get(raw, raw))
    out = match.group(0)
    for unit, factor in _UNIT_SWAPS[match.group(match.lastindex).lower()]:
        other = value * factor
        if other < 1 or abs(other * 2 - round(other * 2)) > 1e-9:
            continue  # only whole or half units: "90 minutes" -> "1.5 hours"
        out += _marked(f"{_plain(other)} {unit}", False, 2)
    return out


def _concepts(text: str) -> str:
    """The text with concept words written after the lexicon's phrases and converted
    durations, dates and times (marked as alternatives)."""
    text = _phrases(text)
    low = text.lower()
    if _UNIT_HINT_RE.search(low) or "hundred" in low or "thousand" in low:
        text = _SPELLED_RE.sub(_spelled, text)
    # Each pass runs only where its words occur (a substring test is far cheaper than a scan).
    digits = HAS_DIGIT_RE.search(text) is not None
    if digits and "hour" in low and "minute" in low:
        text = _COMPOUND_DURATION_RE.sub(_compound_duration, text)
    if digits:
        text = _UNIT_SWAP_RE.sub(_unit_swap, text)
    if digits and ("tb" in low or "gb" in low or "byte" in low):
        text = _DATA_SIZE_RE.sub(_data_size, text)
    if digits and ("g" in low or "m" in low or "k" in low or "li" in low):
        text = _METRIC_RE.sub(_metric, text)
    if "half a " in low or "half-" in low or "fortnight" in low or "and a half" in low:
        text = _SPOKEN_RE.sub(_spoken, text)
    if digits and any(month in low for month in MONTHS_IN_ORDER):
        text = _DATE_RE.sub(_date, text)
        if any(month in text for month in _MONTH_NAMES):
            text = _DATE_MONTH_FIRST_RE.sub(_date, text)
    if ("half" in low or "quarter" in low) and ("past" in low or " to " in low or "-to-" in low):
        text = _CLOCK_WORD_RE.sub(_clock_words, text)
    if "o'clock" in low:
        text = _OCLOCK_RE.sub(_clock_words, text)
    return text


@lru_cache(maxsize=1)
def related_table() -> dict[str, tuple[tuple[str, int], ...]]:
    """Stem -> ((related stem, kind), ...); kind 0: lexicon "~" line or WordNet synonym,
    1: WordNet hypernym, 2: WordNet hyponym. Loaded once, on first use."""

    def key(word: str) -> str:
        low = UNIT_CANON.get(word, word)
        return stem_of(SYNONYMS.get(low, low))

    table: dict[str, dict[str, int]] = {}

    def add(a: str, b: str, kind: int) -> None:
        ka, kb = key(a), key(b)
        if ka != kb:
            row = table.setdefault(ka, {})
            row[kb] = min(kind, row.get(kb, kind))

    for group in _LEX_RELATED:
        for a in group:
            for b in group:
                add(a, b, 0)
    for line in WORDNET_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        word, *lists = line.split("\t")
        for kind, words in enumerate(lists):
            for other in words.split():
                add(word, other, kind)
    return {k: tuple(sorted(v.items())) for k, v in table.items()}
