"""Response analysis: did a model's response use the memory objects that were injected?

For each injected object the analyser answers REFERENCED or UNUSED, with a score in [0, 1] and a
short reason. SPEC.md §2 classes this detection method (`response_analysis`) as LOW reliability and
halves the weight of what it reports; RFC-0009 §4 calls it best-effort. The method here is
therefore tuned for precision: a REFERENCED it reports should usually be a real use, and a missed
paraphrase only costs a small γ that a stronger signal can still provide.

Pure module: stdlib only, no Django import, deterministic (no randomness, no dict-order
dependence in the result). docs/DETECTION.md describes the method, its weights and threshold and
the measured precision/recall on feedback/data/detection_reference.jsonl.

The default scorer is lexical (`LexicalScorer`); any object with a `threshold` and a
`score(content, response) -> (score, reason)` method can be plugged in instead (`Scorer`), e.g. an
embedding model where one is installed. A scorer that also has `score_many(contents, response)`
is called once per response, so it can prepare the response a single time.
"""

from __future__ import annotations

import math
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple, Protocol, runtime_checkable

REFERENCED: Literal["REFERENCED"] = "REFERENCED"
UNUSED: Literal["UNUSED"] = "UNUSED"
SignalType = Literal["REFERENCED", "UNUSED"]


# --------------------------------------------------------------------------------------------
# Public types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DetectionInput:
    """One injected memory object: its id and its text."""

    object_id: str
    content: str


@dataclass(frozen=True)
class Detection:
    """The analyser's verdict for one injected object."""

    object_id: str
    signal_type: SignalType
    score: float
    reason: str


@runtime_checkable
class Scorer(Protocol):
    """Scores how strongly `response` uses `content`; REFERENCED when score >= threshold."""

    threshold: float

    def score(self, content: str, response: str) -> tuple[float, str]: ...


@runtime_checkable
class BatchScorer(Scorer, Protocol):
    """A scorer that can score many contents against one response, preparing it once."""

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]: ...


def _words(text: str) -> frozenset[str]:
    """A word list written as whitespace-separated text."""
    return frozenset(text.split())


# --------------------------------------------------------------------------------------------
# Lexicon: small, general-purpose English lists, not derived from the reference set.
# --------------------------------------------------------------------------------------------

_STOP_WORDS = _words(
    """
    a an the and or but if then else than as at by for with without from to of in on off into onto
    out over under up down about above below across after afterwards before behind between beyond
    during through throughout until till upon via per within against among around along toward
    towards i me my mine myself we us our ours ourselves you your yours yourself yourselves he him
    his himself she her hers herself it its itself they them their theirs themselves one ones
    this that these those there here what which who whom whose when where why how whether
    am is are was were be been being have has had having do does did doing done can could will
    would shall should may might must ought let lets
    not no nor never none neither nothing nobody
    all any both each either every few more most much many other others some such only own same
    so too very just also still already yet even ever again once further rather instead quite
    really actually perhaps maybe probably usually often sometimes always almost enough
    about around roughly approximately etc e.g eg ie vs
    since because therefore thus hence however although though while whereas unless
    please ok okay yes well sure thanks thank hi hello
    s t d ll m re ve don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn couldn
    mr mrs ms dr st
    """
)

# Words that occur in almost every memory or answer ("User prefers...", "you want to use...").
# They still count, at a low weight, but never make a match on their own.
_GENERIC_WORDS = _words(
    """
    user users customer customers client clients person people someone everyone anyone team
    prefer prefers preferred preference like likes liked want wants wanted wish need needs needed
    use uses used using make makes made making get gets got getting take takes took taken taking
    give gives gave given go goes went going keep keeps kept put puts thing things stuff way ways
    new old good better best great nice lot lots bit kind sort part set sets
    call called calls name named know knows think thinks see look looks try tries tried
    work works worked working help helps also now today currently
    """
)

# Units are informative next to a number but common in long answers, so they weigh less.
_UNIT_WORDS = _words(
    """
    second seconds minute minutes min mins hour hours hr hrs day days week weeks month months
    year years time times percent kg kilo kilos kilogram kilograms km kilometre kilometres
    kilometer kilometers metre metres meter meters cm mm gram grams g ml litre litres liter liters
    euro euros eur dollar dollars usd pound pounds gbp degree degrees yen
    gb mb kb tb ms gigabyte gigabytes megabyte megabytes kilobyte kilobytes terabyte terabytes
    millisecond milliseconds
    """
)

# Normalise a few spellings of the same unit so "5 kg" and "five kilos" share their unit.
_UNIT_CANON = {
    "kilo": "kg",
    "kilos": "kg",
    "kilogram": "kg",
    "kilograms": "kg",
    "kilometre": "km",
    "kilometres": "km",
    "kilometer": "km",
    "kilometers": "km",
    "min": "minute",
    "mins": "minute",
    "hr": "hour",
    "hrs": "hour",
    "eur": "euro",
    "litre": "liter",
    "litres": "liter",
    "metre": "meter",
    "metres": "meter",
    "gigabyte": "gb",
    "gigabytes": "gb",
    "megabyte": "mb",
    "megabytes": "mb",
    "kilobyte": "kb",
    "kilobytes": "kb",
    "terabyte": "tb",
    "terabytes": "tb",
    "millisecond": "ms",
    "milliseconds": "ms",
}

# "one" is left out: it is far more often a pronoun ("the aluminium one") than a number.
_NUMBER_WORDS = {
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "twenty": "20",
    "thirty": "30",
    "forty": "40",
    "fifty": "50",
    "sixty": "60",
    "hundred": "100",
    "thousand": "1000",
}

# Month names stay content words even when they collide with a stop word ("May").
_MONTHS_IN_ORDER = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTHS = frozenset(_MONTHS_IN_ORDER)

# Negation cues. "n't" contractions are turned into the cue "not" by the tokenizer.
_NEGATION_CUES = frozenset({"not", "no", "never", "without", "nor", "neither", "none", "cannot"})
_NEGATION_VERBS = frozenset({"stopped", "quit", "quitting"})  # "stopped taking X" negates X
_GIVE_UP = frozenset({"give", "gave", "given", "giving"})  # "gave up X" negates X
# Cues of a state that is over (issue #18): "formerly", "used to", "no longer", "anymore"...
_PAST_CUES = frozenset({"formerly", "previously", "former", "once-", "ex"})
_POSTFIX_CUES = frozenset({"anymore", "discontinued", "deprecated"})
_CHANGE_VERBS = frozenset(
    {"replaced", "retired", "dropped", "ditched", "abandoned", "removed", "scrapped", "cancelled"}
)
_PASSIVE = frozenset({"been", "was", "were", "is", "are", "got", "be"})
_MOVE_VERBS = frozenset(
    {"switched", "switching", "moved", "moving", "migrated", "migrating", "changed", "away"}
)
_FROM_WORDS = frozenset({"from"})
_CHANGE_STOPS = frozenset({"to", "into", "onto", "with", "by", "for", "towards"})
_NP_NEGATIONS = frozenset({"no", "without"})
_PHRASE_STOPS = _CHANGE_STOPS | frozenset({"in", "on", "at", "from", "after", "before", "so"})
# A negation reaches at most this many tokens, and stops at a clause boundary.
_NEGATION_WINDOW = 6
_CLAUSE_WORDS = _words(
    """
    but so because since although though while whereas however instead rather unless which
    """
)
_CLAUSE_PUNCT = frozenset(',;:.!?()[]{}"—–\n')
# A memory that states several facts is split into clauses here; using one of them is a use.
_FACT_SPLIT_WORDS = frozenset({"and", "but", "while", "whereas", "which", "plus"})
_SENTENCE_PUNCT = frozenset('.!?:;\n"`*•—–')  # a capital after these may not be a name
_SENTENCE_END = frozenset(".!?\n")

_CONTRACTION_BASE = {"ca": "can", "wo": "will", "sha": "shall", "ai": "is"}
_CLITICS = ("'s", "'re", "'ve", "'ll", "'d", "'m")

_TOKEN_SPLIT_RE = re.compile(r"(\w+(?:'\w+)?(?:[.\-/@:+]\w+(?:'\w+)?)*)")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPLIT_RE = re.compile(r"[.\-/@:+_]")
_DECIMAL_RE = re.compile(r"\d+\.\d+")
_ORDINAL_RE = re.compile(r"(\d+)(?:st|nd|rd|th)")
_HAS_DIGIT_RE = re.compile(r"\d")
_COMBINING_RE = re.compile(r"[\u0300-\u036f]+")
_SEPARATORS = frozenset(".-/@:+_")

# Token classes and their weights (see docs/DETECTION.md, "Features and weights").
_GENERIC = "generic"  # user, prefer, use ...          weight 0.3, never a match on its own
_UNIT = "unit"  # minute, euro, kg ...                  weight 0.5, never a match on its own
_WORD = "word"  # any other content word                weight 1.0 (0.7 for <= 3 letters)
_PROPER = "proper"  # capitalised mid-sentence          weight 2.0; ALL-CAPS acronym 1.5
_NUM = "num"  # 45, 3.2, 2027, "five"                   weight 2.0; >= 3 digits or decimal 2.5
_ID = "id"  # PG-15, eu-west-1, a@b.io, 1.4.2, X1, 9:15  weight 3.0

_W_GENERIC = 0.3
_W_UNIT = 0.5
_W_WORD = 1.0
_W_SHORT_WORD = 0.7
_W_PROPER = 2.0
_W_ACRONYM = 1.5
_W_NUM = 2.0
_W_NUM_DISTINCT = 2.5
_W_ID = 3.0


# --------------------------------------------------------------------------------------------
# Stemming
# --------------------------------------------------------------------------------------------

_NO_ING_STRIP = _words(
    """
    evening morning spring string thing king ring wing sing nothing something anything
    everything ceiling during bring sibling wedding pudding bling sling swing ping ming
    """
)
# Inflectional suffixes (one is stripped), then derivational ones (one is stripped).
_INFLECTIONS = (
    ("ies", "y"),
    ("ied", "y"),
    ("sses", "ss"),
    ("ings", ""),
    ("ing", ""),
    ("edly", ""),
    ("ed", ""),
    ("es", ""),
    ("ly", ""),
    ("s", ""),
)
_DERIVATIONS = (
    ("isation", "ise"),
    ("ization", "ise"),
    ("ational", "ate"),
    ("fulness", ""),
    ("iveness", ""),
    ("ation", ""),
    ("ition", ""),
    ("ement", ""),
    ("ment", ""),
    ("ness", ""),
    ("ship", ""),
    ("able", ""),
    ("ible", ""),
    ("ist", ""),
    ("ism", ""),
    ("ity", ""),
    ("ive", ""),
    ("ful", ""),
    ("ous", ""),
    ("ian", ""),
    ("al", ""),
    ("er", ""),
    ("or", ""),
    ("y", ""),
)
_MIN_STEM = 3
# Suffix -> replacement, tried longest first (the tables above never hold two suffixes of one
# length that end the same word, so "longest first" is the order they are listed in).
_INFLECTION_MAP = dict(_INFLECTIONS)
_DERIVATION_MAP = dict(_DERIVATIONS)
_SUFFIX_LENGTHS = tuple(
    sorted({len(k) for k in (*_INFLECTION_MAP, *_DERIVATION_MAP)}, reverse=True)
)


def _strip_suffix(word: str, table: dict[str, str], min_stem: int) -> str:
    """Strip the longest suffix of `table` that leaves a stem of at least `min_stem` letters."""
    n = len(word)
    for length in _SUFFIX_LENGTHS:
        if length >= n:
            continue
        repl = table.get(word[-length:])
        if repl is not None and n - length + len(repl) >= min_stem:
            return word[:-length] + repl
    return word


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A small, deterministic suffix stripper (Porter-like, much simpler).

    It only has to map inflected and derived forms of the same word to one key ("indentation",
    "indented", "indents" -> "indent"); it does not have to produce real words.
    """
    if len(word) <= _MIN_STEM or not word.isalpha():
        return word
    w = word
    if w not in _NO_ING_STRIP and not w.endswith(("ss", "us", "is")):
        w = _strip_suffix(w, _INFLECTION_MAP, _MIN_STEM)
    w = _strip_suffix(w, _DERIVATION_MAP, _MIN_STEM + 1)
    if len(w) > _MIN_STEM and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # running -> runn -> run; cancelled -> cancell -> cancel
    if len(w) > _MIN_STEM + 1 and w.endswith("e"):
        w = w[:-1]  # plane / planes -> plan; exercise / exercises -> exercis
    return w


_GENERIC_STEMS = frozenset(_stem(w) for w in _GENERIC_WORDS)
_UNIT_STEMS = frozenset(_stem(_UNIT_CANON.get(w, w)) for w in _UNIT_WORDS)


# --------------------------------------------------------------------------------------------
# Tokenisation
# --------------------------------------------------------------------------------------------


class _Token(NamedTuple):  # a NamedTuple: built for every distinct word, so cheap to make
    key: str  # matching key: stem, normalised number or lower-cased identifier
    cls: str
    weight: float
    negated: bool
    proper: bool  # capitalised mid-sentence (a name) in the text it came from
    parts: tuple[str, ...] = ()  # for identifiers: keys of the alphanumeric parts
    alt: bool = False  # a concept the lexicon wrote after a phrase: optional in a memory
    covers: tuple[str, ...] = ()  # for a concept: keys of its phrase's words


# --------------------------------------------------------------------------------------------
# Number and unit normalisation (issue #18): one spelling for one quantity
# --------------------------------------------------------------------------------------------

_TEENS = {
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_ONES = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
_COMPOUND_RE = re.compile(
    r"\b(" + "|".join(_TENS) + r")[- ](" + "|".join(_ONES) + r")\b", re.IGNORECASE
)
_TEENS_RE = re.compile(r"\b(" + "|".join(_TEENS) + r")\b", re.IGNORECASE)
_DURATIONS = (  # (pattern, replacement), tried in this order at each position
    (r"three[- ]quarters of an hour", "45 minutes"),
    (r"(?:an|one) hour and a half", "90 minutes"),
    (r"(?:one and a half|1\.5) hours?", "90 minutes"),
    (r"half an hour|half-hour|half hour", "30 minutes"),
    (r"(?:a )?quarter of an hour|quarter-hour", "15 minutes"),
    (r"a dozen", "12"),
    (r"noon|midday", "12:00"),
    (r"midnight", "00:00"),
)
_DURATION_RE = re.compile(
    r"\b(?:" + "|".join(f"({p})" for p, _ in _DURATIONS) + r")\b", re.IGNORECASE
)
# 5 pm, 5pm, 5:30 p.m., 11 AM -> 17:00, 17:30, 11:00; 9:05 stays 9:05 -> 09:05
_CLOCK_RE = re.compile(r"\b(\d{1,2})(?::(\d\d))?\s?([ap])\.?m\b\.?", re.IGNORECASE)
_FULL_HOUR_RE = re.compile(r"(\d\d):00")
_LATE_HHMM_RE = re.compile(r"(1[3-9]|2[0-3]):(\d\d)")
_HHMM_RE = re.compile(r"\b(\d{1,2}):(\d\d)\b(?!:)")
_CURRENCY_RE = re.compile(
    r"([€$£¥])\s?(\d+(?:\.\d+)?)(\s?(?:[kKmM]|million|thousand|billion|bn)\b)?"
)
_CURRENCY_WORD = {"€": "euros", "$": "dollars", "£": "pounds", "¥": "yen"}
_SCALED_RE = re.compile(r"\b(\d+(?:\.\d+)?)\s?([kK]|[mM]|million|thousand)\b(?![-\w])")
_VERSION_RE = re.compile(r"\b[vV](\d+(?:\.\d+)+|\d+)\b")
_GLUED_UNIT_RE = re.compile(
    r"\b(\d+(?:\.\d+)?)(gb|mb|kb|tb|ms|kg|km|cm|mm|ml|hrs?|mins?|h|s)\b", re.IGNORECASE
)
_GLUED_UNIT = {
    "h": "hours",
    "hr": "hours",
    "hrs": "hours",
    "s": "seconds",
    "min": "minutes",
    "mins": "minutes",
}
_PERCENT_RE = re.compile(r"(\d)\s?%")
_SCALE = {
    "k": 1000,
    "thousand": 1000,
    "m": 1_000_000,
    "million": 1_000_000,
    "billion": 1_000_000_000,
    "bn": 1_000_000_000,
}


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def _clock(match: re.Match) -> str:
    hour, minute, half = int(match.group(1)), match.group(2) or "00", match.group(3).lower()
    if hour > 12:
        return match.group(0)
    hour = hour % 12 + (12 if half == "p" else 0)
    return f"{hour:02d}:{minute}"


def _scaled(match: re.Match) -> str:
    return _plain(float(match.group(1)) * _SCALE[match.group(2).lower()])


def _currency(match: re.Match) -> str:
    amount = float(match.group(2))
    if match.group(3):
        amount *= _SCALE[match.group(3).strip().lower()]
    return f"{_plain(amount)} {_CURRENCY_WORD[match.group(1)]}"


_NUMBER_WORD_RE = re.compile(
    r"\b(?:("
    + "|".join(_TENS)
    + r")(?:[- ]("
    + "|".join(_ONES)
    + r"))?|("
    + "|".join(_TEENS)
    + r"))\b",
    re.IGNORECASE,
)
# One pass for the digit forms; the first alternative that matches wins.
_QUANTITY_RE = re.compile(
    r"\b(?:"
    r"(?P<clock>(\d{1,2})(?::(\d\d))?\s?([apAP])\.?[mM]\b\.?)"
    r"|(?P<hhmm>(\d{1,2}):(\d\d)\b(?!:))"
    r"|(?P<scaled>(\d+(?:\.\d+)?)\s?([kK]|M|million|thousand)\b(?!-\d))"
    r"|(?P<glued>(\d+(?:\.\d+)?)(gb|mb|kb|tb|ms|kg|km|cm|mm|ml|hrs?|mins?|h|s|GB|MB|KB|TB)\b)"
    r"|(?P<version>[vV](\d+(?:\.\d+)*)\b)"
    r")"
)


def _number_word(match: re.Match) -> str:
    if match.group(3):
        return str(_TEENS[match.group(3).lower()])
    tens = _TENS[match.group(1).lower()]
    if match.group(2):
        return str(tens + _ONES[match.group(2).lower()])
    return match.group(0)  # a bare "twenty" is handled by the tokenizer's number words


def _quantity(m: re.Match) -> str:
    kind = m.lastgroup
    g = m.groups()
    if kind == "clock":
        hour, minute, half = int(g[1]), g[2] or "00", g[3].lower()
        if hour > 12:
            return m.group(0)
        return f"{hour % 12 + (12 if half == 'p' else 0):02d}:{minute}"
    if kind == "hhmm":
        return f"{int(g[5]):02d}:{g[6]}"
    if kind == "scaled":
        return _plain(float(g[8]) * _SCALE[g[9].lower()])
    if kind == "glued":
        return f"{g[11]} {_GLUED_UNIT.get(g[12].lower(), g[12].lower())}"
    return g[14]


def _normalise_numbers(text: str) -> str:
    """Rewrite equivalent forms of a quantity into one: "€1,200" -> "1200 euros", "2.5k" ->
    "2500", "5 pm" -> "17:00", "three quarters of an hour" -> "45 minutes", "v3.11" -> "3.11",
    "5GB" -> "5 gb", "twenty-five" -> "25", "15%" -> "15 percent". Thousands separators are
    already gone."""
    low = text.lower()
    if "hour" in low or "dozen" in low or "noon" in low or "mid" in low:
        text = _DURATION_RE.sub(lambda m: _DURATIONS[m.lastindex - 1][1], text)
    if _NUMBER_WORD_HINT_RE.search(low):
        text = _NUMBER_WORD_RE.sub(_number_word, text)
    if not _HAS_DIGIT_RE.search(text):
        return text
    if "€" in text or "$" in text or "£" in text or "¥" in text:
        text = _CURRENCY_RE.sub(_currency, text)
    text = _QUANTITY_RE.sub(_quantity, text)
    if "%" not in text:
        return text
    return _PERCENT_RE.sub(r"\1 percent", text)


_NUMBER_WORD_HINT_RE = re.compile(r"(?:" + "|".join([*_TEENS, *_TENS]) + r")")


# --------------------------------------------------------------------------------------------
# The quoted user question (issue #18)
# --------------------------------------------------------------------------------------------

# A response that restates the user's question ("You asked: '...'", "> ...", "Re: '...'") has
# the question's words without having used any memory; the restatement is dropped before
# scoring, and what follows it is scored as usual (labelling guide E7, R8, U5).
_QUOTE_FRAME_RE = re.compile(
    r"(?:\b(?i:you(?:'re| are| were)? ask(?:ed|ing)(?: me)?|your question(?: was| is)?"
    r"|you wrote|quoting you|to your question)\b|\b(?:Re|RE|Q)\s*:)[ \t]*[:,\-]?[ \t]*"
)
_BLOCKQUOTE_RE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_QUOTE_CHARS = "'\"“”"
_QUOTE_REACH = 400


def _strip_quoted_question(text: str) -> str:
    """The text without restatements of the user's question (replaced by a sentence break)."""
    if ">" in text:
        text = _BLOCKQUOTE_RE.sub(" . ", text)
    if _QUOTE_FRAME_RE.search(text) is None:
        return text
    out: list[str] = []
    pos = 0
    for m in _QUOTE_FRAME_RE.finditer(text):
        if m.start() < pos:
            continue
        rest = text[m.end() : m.end() + _QUOTE_REACH]
        line = rest.split("\n", 1)[0]
        q = line.find("?")
        if q >= 0:
            end = q + 1
            while end < len(line) and line[end] in _QUOTE_CHARS:
                end += 1
        elif line[:1] in _QUOTE_CHARS:
            close = line.find(line[0] if line[0] in "'\"" else "”", 1)
            end = close + 1 if close > 0 else len(line)
        else:
            stop = re.search(r"[.!](?:\s|$)", line)
            end = stop.end() if stop else len(line)
        out.append(text[pos : m.start()])
        out.append(" . ")
        pos = m.end() + end
    out.append(text[pos:])
    return "".join(out)


def without_quoted_question(text: str) -> str:
    """The response as the analyser reads it: restatements of the user's question dropped.
    Public for other scorers (feedback/embedding.py), so that the rule lives here only."""
    return _strip_quoted_question(text.replace("’", "'").replace("‘", "'"))


_RETRACTION_WORD_RE = re.compile(r"[a-z]+")
_RETRACTION_WORDS = _NEGATION_VERBS | _PAST_CUES | _POSTFIX_CUES | _CHANGE_VERBS


def retraction_cues(text: str) -> frozenset[str]:
    """The "no longer true" cue words in a text: "no longer", "anymore", "used to", "formerly",
    "previously", "stopped", "quit", "retired", "replaced"... (the cue lists of the lexical
    contradiction check, without its scopes). Plain negation ("not", "no", "without") is left
    out on purpose: it is as often how a rule is applied ("a dish without meat") as how a memory
    is denied. A scorer that cannot see negation (an embedding) uses this to refuse a match
    whose passage says a state is over when the memory does not."""
    text = text.lower().replace("’", "'")
    words = _RETRACTION_WORD_RE.findall(text)
    found = set()
    for prev, low in zip(["", *words], words, strict=False):
        if low in _RETRACTION_WORDS:
            found.add(low)
        elif low == "to" and prev == "used":
            found.add("used to")
        elif low == "longer" and prev == "no":
            found.add("no longer")
    return frozenset(found)


def _normalise(text: str, concepts: bool = True) -> str:
    text = text.replace("’", "'").replace("‘", "'").replace("×", "x")
    if not text.isascii():  # "Keflavík" and "Keflavik" are the same word
        text = _COMBINING_RE.sub("", unicodedata.normalize("NFKD", text))
    text = _normalise_numbers(_THOUSANDS_RE.sub("", text))  # 1,150 -> 1150
    return _concepts(text) if concepts else text


# --------------------------------------------------------------------------------------------
# Synonyms (issue #18): a small, general English table, not derived from either labelled set.
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
_SYNONYMS = {w: group.split()[0] for group in _SYNONYM_GROUPS for w in group.split()[1:]}


# --------------------------------------------------------------------------------------------
# Concept lexicon (issue #18): feedback/data/detection_lexicon.txt, general English written by
# hand (its header explains the three kinds of line), and feedback/data/detection_wordnet.txt,
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
# itself ("doesn't eat meat" -> vegetarian, asserted): chr(_MARK_BASE + 2 n + absorb).
_MARK_BASE = 0xE000
_MARK_LOW, _MARK_HIGH = chr(_MARK_BASE), chr(_MARK_BASE + 0xFF)
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
        _SYNONYMS.setdefault(_w, _group[0])
# The table is read before stemming, so its plurals and third persons are written out too
# ("starts" is "start", which is "begin").
for _w, _canon in list(_SYNONYMS.items()):
    if len(_w) >= 3 and _w.isalpha() and not _w.endswith("s"):
        _SYNONYMS.setdefault(_w + "s", _canon)


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
_UNIT_SWAP_RE = re.compile(
    r"(\d+(?:\.\d+)?)[ -]((?i:minute|hour|day|week|month|year))(?i:s)?\b(?![-\w])"
)
# A spelled number before a unit or a scale, in one pass: "six months" also reads "0.5 years"
# (no: only whole or half units), "four hundred" is 400, "five thousand" 5000.
_SPELLED_WORDS = sorted([*_SMALL_NUMBERS, "a", "one"])
_SPELLED_RE = re.compile(
    r"("
    + _trie_pattern(sorted({*_SPELLED_WORDS, *(w.capitalize() for w in _SPELLED_WORDS)}))
    + r")(?: ((?i:hundred|thousand))\b(?![- ]and)"
    r"|[ -]((?i:minute|hour|day|week|month|year))(?i:s)?\b(?![-\w]))"
)
_UNIT_HINT_RE = re.compile(r"(?:minute|hour|day|week|month|year)", re.IGNORECASE)
# Other spellings of a date, a time of day or a duration, written after them as alternatives.
_MONTH_NUMBER = {m: i for i, m in enumerate(_MONTHS_IN_ORDER, start=1)}
_MONTH_NAMES = tuple(m.capitalize() for m in _MONTHS_IN_ORDER)
_MONTH_ALT = "|".join(_MONTHS_IN_ORDER)
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
}
_SPOKEN_RE = re.compile(r"(?:[Hh]alf a (?:year|day|dozen)|[Aa] (?:year and a half|fortnight))\b")


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
    return match.group(0) + _marked(iso, False, len(_TOKEN_SPLIT_RE.findall(match.group(0))))


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
    n = len(_TOKEN_SPLIT_RE.findall(match.group(0)))
    return match.group(0) + _marked(f"{hour:02d}:{minute:02d}", False, n)


def _spoken(match: re.Match) -> str:
    if _inside_word(match):
        return match.group(0)
    n = len(_TOKEN_SPLIT_RE.findall(match.group(0)))
    return match.group(0) + _marked(_SPOKEN_DURATIONS[match.group(0).lower()], False, n)


_UNIT_SWAPS = {  # unit -> ((other unit, factor to it), ...)
    "minute": (("hours", 1 / 60),),
    "hour": (("minutes", 60), ("days", 1 / 24)),
    "day": (("weeks", 1 / 7), ("hours", 24)),
    "week": (("days", 7),),
    "month": (("years", 1 / 12),),
    "year": (("months", 12),),
}


def _marked(words: str, absorb: bool, covers: int) -> str:
    out = []
    for i, w in enumerate(words.split()):
        out.append(f" {chr(_MARK_BASE + 2 * (covers if i == 0 else 0) + absorb)}{w}")
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
        out.append(_marked(concept, absorb, min(60, len(_TOKEN_SPLIT_RE.findall(phrase)))))
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
    digits = _HAS_DIGIT_RE.search(text) is not None
    if digits:
        text = _UNIT_SWAP_RE.sub(_unit_swap, text)
    if "half a " in low or "fortnight" in low or "and a half" in low:
        text = _SPOKEN_RE.sub(_spoken, text)
    if digits and any(month in low for month in _MONTHS_IN_ORDER):
        text = _DATE_RE.sub(_date, text)
        if any(month in text for month in _MONTH_NAMES):
            text = _DATE_MONTH_FIRST_RE.sub(_date, text)
    if ("half" in low or "quarter" in low) and ("past" in low or " to " in low or "-to-" in low):
        text = _CLOCK_WORD_RE.sub(_clock_words, text)
    if "o'clock" in low:
        text = _OCLOCK_RE.sub(_clock_words, text)
    return text


@lru_cache(maxsize=1)
def _related_table() -> dict[str, tuple[tuple[str, int], ...]]:
    """Stem -> ((related stem, kind), ...); kind 0: lexicon "~" line or WordNet synonym,
    1: WordNet hypernym, 2: WordNet hyponym. Loaded once, on first use."""

    def key(word: str) -> str:
        low = _UNIT_CANON.get(word, word)
        return _stem(_SYNONYMS.get(low, low))

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


# --------------------------------------------------------------------------------------------
# Word weights from word frequencies (issue #18)
# --------------------------------------------------------------------------------------------

# A content word weighs by how rare it is in English (wordfreq's Zipf scale: 7 = "the",
# 3 = "penicillin"): rarer words are less likely to be shared by chance. Linear in Zipf between
# _IDF_COMMON and _IDF_RARE; words missing from the list count as rare.
_IDF_COMMON = (5.5, 0.5)  # Zipf 5.5 and above ("school", "team"): weight 0.5
_IDF_SLOPE = 0.45  # weight gained per Zipf point below 5.5
_IDF_MAX = 1.8  # Zipf 2.7 and below, or unknown


@lru_cache(maxsize=1)
def _frequencies() -> dict[str, float]:
    import wordfreq  # loaded on first use: about 0.15 s, 321k words

    return wordfreq.get_frequency_dict("en", wordlist="large")


def _idf_weight(word: str) -> float:
    freq = _frequencies().get(word)
    if not freq:
        return _IDF_MAX
    zipf = math.log10(freq) + 9.0
    common, floor = _IDF_COMMON
    return min(_IDF_MAX, max(floor, floor + (common - zipf) * _IDF_SLOPE))


def _word_token(raw: str, negated: bool, sentence_start: bool) -> _Token | None:
    """Classify one alphabetic or numeric word; None for stop words and single letters."""
    low = raw.lower()
    if low.isdigit():
        weight = _W_NUM_DISTINCT if len(low) >= 3 else _W_NUM
        return _Token(low, _NUM, weight, negated, False)
    m = _ORDINAL_RE.fullmatch(low)
    if m:
        return _Token(m.group(1), _NUM, _W_NUM, negated, False)
    if low in _NUMBER_WORDS:
        return _Token(_NUMBER_WORDS[low], _NUM, _W_NUM, negated, False)
    if _HAS_DIGIT_RE.search(low):  # B2, X1, 5k, A350, 2560x1440
        return _Token(low, _ID, _W_ID, negated, False)
    if len(low) < 2 or not low.isalpha():
        return None
    capitalised = raw[0].isupper()
    if low in _STOP_WORDS and not (capitalised and low in _MONTHS and not sentence_start):
        return None
    low = _UNIT_CANON.get(low, low)
    weight = _idf_weight(low)
    low = _SYNONYMS.get(low, low)
    key = _stem(low)
    if key in _GENERIC_STEMS:
        return _Token(key, _GENERIC, _W_GENERIC, negated, False)
    if key in _UNIT_STEMS:
        return _Token(key, _UNIT, _W_UNIT, negated, False)
    if len(raw) >= 2 and raw.isupper():
        return _Token(key, _PROPER, _W_ACRONYM, negated, True)
    if capitalised and not sentence_start:
        return _Token(key, _PROPER, _W_PROPER, negated, True)
    return _Token(key, _WORD, weight, negated, False)


def _split_compound(raw: str, negated: bool, sentence_start: bool) -> list[_Token]:
    """Tokens for a raw token with separators: a decimal, an identifier, or hyphenated words."""
    if _DECIMAL_RE.fullmatch(raw):
        return [_Token(raw, _NUM, _W_NUM_DISTINCT, negated, False)]
    parts = [p for p in _SPLIT_RE.split(raw) if p]
    hyphen_only = all(sep == "-" for sep in re.findall(r"[.\-/@:+_]", raw))
    words_after = all(p.isalpha() for p in parts[1:])
    lead_number = parts and (parts[0].isdigit() or parts[0].lower() in _NUMBER_WORDS)
    if hyphen_only and all(p.isalpha() for p in parts):
        lows = [p.lower() for p in parts]
        if any(w in _STOP_WORDS or _stem(w) in _GENERIC_STEMS for w in lows):
            # "on-call", "carry-on", "sign-off": the parts alone would lose the meaning.
            tok = _word_token("".join(parts), negated, sentence_start)
            return [tok] if tok is not None else []
    if hyphen_only and (all(p.isalpha() for p in parts) or (lead_number and words_after)):
        # "low-cost", "red-green", "45-minute", "six-month": just the words.
        out = []
        for i, p in enumerate(parts):
            tok = _word_token(p, negated, sentence_start and i == 0)
            if tok is not None:
                out.append(tok)
        return out
    if all(len(p) == 1 and p.isalpha() for p in parts):
        return []  # a.m, e.g, i.e
    part_keys = []
    for p in parts:
        tok = _word_token(p, negated, True)
        if tok is not None and tok.cls != _GENERIC:
            part_keys.append(tok.key)
    return [_Token(raw.lower(), _ID, _W_ID, negated, False, tuple(part_keys))]


@dataclass(slots=True)
class _Tokens:
    tokens: list[_Token]
    clauses: list[int]  # clause number of each token (split at punctuation, "and", "but" ...)
    sentences: list[int]  # sentence number of each token
    sentence_starts: list[int]  # character offset where each sentence starts


@lru_cache(maxsize=65536)
def _lex(raw: str, sentence_start: bool) -> tuple[tuple[_Token, ...], str, bool]:
    """(tokens, lower-cased word, is a "n't" negation) for one regex match; cached, as a long
    response repeats most of its words."""
    low = raw.lower()
    cue = False
    if "'" in raw:
        if low.endswith("n't"):
            base = low[:-3]
            raw = low = _CONTRACTION_BASE.get(base, base)
            cue = True
        else:
            for clitic in _CLITICS:
                if low.endswith(clitic):
                    raw = raw[: -len(clitic)]
                    low = low[: -len(clitic)]
                    break
            raw = raw.replace("'", "")
            low = low.replace("'", "")
    if not raw:
        return (), low, cue
    if not raw.isalnum() and _SEPARATORS.intersection(raw):
        return tuple(_split_compound(raw, False, sentence_start)), low, cue
    tok = _word_token(raw, False, sentence_start)
    return ((tok,) if tok is not None else ()), low, cue


@lru_cache(maxsize=16384)
def _negate(tok: _Token) -> _Token:
    return _Token(tok.key, tok.cls, tok.weight, True, tok.proper, tok.parts, tok.alt, tok.covers)


def _as_alt(tok: _Token, covers: tuple[str, ...]) -> _Token:
    return _Token(tok.key, tok.cls, tok.weight, False, False, tok.parts, True, covers)


def _tokenise(text: str) -> _Tokens:
    """Content tokens of `text` in order, each marked negated when inside a negation's scope."""
    tokens: list[_Token] = []
    clauses: list[int] = []
    sentences: list[int] = []
    sentence_starts: list[int] = [0]
    clause = sentence = 0
    neg_left = 0
    neg_stops: frozenset[str] = frozenset()
    scope_start = 0  # first token of the current clause: how far back "... anymore" reaches
    prev_low = ""
    piece_starts: list[int] = []  # number of tokens before each word of the text as written
    # [gap, token, gap, token, ..., gap]: faster than finditer, and the gaps come for free.
    pieces = _TOKEN_SPLIT_RE.split(text)
    pos = 0
    for i in range(1, len(pieces), 2):
        gap = pieces[i - 1]
        raw = pieces[i]
        start = pos + len(gap)
        pos = start + len(raw)
        if gap == " ":
            sentence_start = prev_low == ""
        else:
            sentence_start = (prev_low == "") or not _SENTENCE_PUNCT.isdisjoint(gap)
            if not _CLAUSE_PUNCT.isdisjoint(gap) or " - " in gap:
                neg_left = 0
                scope_start = len(tokens)
                clause += 1
                if tokens and not _SENTENCE_END.isdisjoint(gap):
                    sentence_starts.append(start)
                    sentence += 1
        lexed, low, cue = _lex(raw, sentence_start)
        if gap == " " or not gap or not _MARK_LOW <= gap[-1] <= _MARK_HIGH:
            piece_starts.append(len(tokens))  # words of the text only, not written concepts
        else:  # a concept written by the lexicon
            code = ord(gap[-1]) - _MARK_BASE
            n, absorb = code // 2, code % 2
            covers: tuple[str, ...] = ()
            if n and piece_starts:
                first = piece_starts[max(0, len(piece_starts) - n)]
                covers = tuple(t.key for t in tokens[first:] if not t.alt)
            for tok in lexed:
                alt = _as_alt(tok, covers)
                tokens.append(_negate(alt) if neg_left and not absorb else alt)
                clauses.append(clause)
                sentences.append(sentence)
            continue
        if low in _CLAUSE_WORDS:
            neg_left = 0
            scope_start = len(tokens)
        elif neg_left and low in neg_stops:
            neg_left = 0  # "switched from Jenkins to GitHub Actions": the scope ends at "to"
        if low in _FACT_SPLIT_WORDS:
            clause += 1
        if lexed:
            for tok in lexed:
                tokens.append(_negate(tok) if neg_left else tok)
                clauses.append(clause)
                sentences.append(sentence)
        if neg_left:
            neg_left -= 1
        if (
            cue
            or low in _NEGATION_CUES
            or low in _NEGATION_VERBS
            or low in _PAST_CUES
            or (low == "up" and prev_low in _GIVE_UP)
            or (low == "to" and prev_low == "used")  # "you used to live in Berlin"
        ):
            neg_left = _NEGATION_WINDOW
            # "no" and "without" deny a noun phrase: "no lift to your flat" says nothing
            # against the flat.
            neg_stops = _PHRASE_STOPS if low in _NP_NEGATIONS else frozenset()
        elif low in _CHANGE_VERBS or (low in _FROM_WORDS and prev_low in _MOVE_VERBS):
            neg_left = _NEGATION_WINDOW  # "replaced Jenkins with ...", "moved from Berlin to"
            neg_stops = _CHANGE_STOPS
        if low in _POSTFIX_CUES or (low in _CHANGE_VERBS and prev_low in _PASSIVE):
            # "Jenkins has been retired", "isn't your favourite anymore": back to clause start
            for j in range(max(scope_start, len(tokens) - _NEGATION_WINDOW), len(tokens)):
                tokens[j] = _negate(tokens[j])
        prev_low = low or prev_low
    return _Tokens(tokens, clauses, sentences, sentence_starts)


# --------------------------------------------------------------------------------------------
# Prepared texts
# --------------------------------------------------------------------------------------------

_POS = 1
_NEG = 2
_PAIR_WINDOW = 3  # two terms are "near" when at most 2 content terms lie between them
_YEAR_RE = re.compile(r"(19|20)\d\d")


@dataclass(frozen=True, slots=True)
class _Response:
    occurrences: dict[str, dict[int, int]]  # key -> {sentence: _POS | _NEG bits}
    proper: frozenset[str]  # keys seen capitalised mid-sentence
    pairs: frozenset[tuple[str, str]]  # unordered pairs of near content terms
    has_numbers: bool
    text: str  # normalised, lower-cased, for identifier look-ups
    sentence_starts: tuple[int, ...]  # character offsets, for placing identifier look-ups
    names_at: dict[int, frozenset[str]]  # sentence -> keys of the names in it
    others_at: dict[int, frozenset[str]]  # sentence -> other people ("Bob's", "your friend")
    quoted: bool  # a restatement of the user's question was dropped
    numbers_at: dict[int, frozenset[str]]  # sentence -> keys of the numbers in it


@dataclass(frozen=True, slots=True)
class _Memory:
    terms: tuple[_Token, ...]  # de-duplicated content terms, in order
    pairs: tuple[tuple[str, str], ...]  # adjacent non-generic terms, unordered
    facts: tuple[_Memory, ...] = ()  # its clauses, when it states several facts
    subject: str | None = None  # "user", a possessor's key ("alice"), or None
    cues: frozenset[str] = frozenset()  # its own "no longer true" cues (retraction_cues)


# A match: credit in [0, 1] (1.0 = exact) and where it occurred: {sentence: bits}.
_Match = tuple[float, dict[int, int]]
_NO_MATCH: _Match = (0.0, {})


def _is_numeric(tok: _Token) -> bool:
    return tok.cls == _NUM or (tok.cls == _ID and _HAS_DIGIT_RE.search(tok.key) is not None)


def _is_anchor(tok: _Token) -> bool:
    """A term specific enough that finding it verbatim is evidence of use on its own:
    identifiers (KX-48213, 2027-02-28, eu-west-1, max_connections, a@b.io) and long
    numbers that are not years (5433, 62000)."""
    if tok.cls == _ID:
        return len(tok.key) >= 4 and (
            _HAS_DIGIT_RE.search(tok.key) is not None or any(c in tok.key for c in "._@/")
        )
    return (
        tok.cls == _NUM
        and tok.key.isdigit()
        and len(tok.key) >= 4
        and not (len(tok.key) == 4 and _YEAR_RE.fullmatch(tok.key))
    )


_DAYS = _words(
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday "
    "christmas easter"
)
_DAY_STEMS = frozenset(_stem(w) for w in _DAYS | _MONTHS)


def _entities(norm: str, starts: Sequence[int]) -> dict[int, frozenset[str]]:
    """Per sentence: people other than the reader the text attributes things to."""
    found: dict[int, set[str]] = {}
    for m in _POSSESSOR_RE.finditer(norm):
        low = m.group(1).lower()
        if low in _STOP_WORDS or low in _GENERIC_WORDS or low in _DAYS or low in _MONTHS:
            continue
        found.setdefault(bisect_right(starts, m.start()) - 1, set()).add(_stem(low))
    for m in _RELATION_RE.finditer(norm):
        low = m.group(1).lower()
        found.setdefault(bisect_right(starts, m.start()) - 1, set()).add(
            _stem(_SYNONYMS.get(low, low))
        )
    return {s: frozenset(v) for s, v in found.items()}


def _prepare_response(response: str, concepts: bool = True) -> _Response:
    normalised = _normalise(response, concepts)
    norm = _strip_quoted_question(normalised)
    occurrences: dict[str, dict[int, int]] = {}
    proper: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    has_numbers = False
    window: list[str] = []
    parsed = _tokenise(norm)
    for tok, sentence in zip(parsed.tokens, parsed.sentences, strict=True):
        bit = _NEG if tok.negated else _POS
        key = tok.key
        where = occurrences.get(key)
        if where is None:
            occurrences[key] = {sentence: bit}
        else:
            where[sentence] = where.get(sentence, 0) | bit
        for part in tok.parts:
            where = occurrences.setdefault(part, {})
            where[sentence] = where.get(sentence, 0) | bit
        if tok.proper:
            proper.add(key)
        if not has_numbers and tok.cls in (_NUM, _ID):
            has_numbers = _is_numeric(tok)
        if tok.cls == _GENERIC:
            continue
        for other in window:
            if other != key:
                pairs.add((other, key) if other < key else (key, other))
        window.append(key)
        if len(window) > _PAIR_WINDOW:
            del window[0]
    names: dict[int, set[str]] = {}
    numbers: dict[int, set[str]] = {}
    for tok, sentence in zip(parsed.tokens, parsed.sentences, strict=True):
        if tok.proper and tok.weight == _W_PROPER and tok.key not in _DAY_STEMS:
            names.setdefault(sentence, set()).add(tok.key)
        if tok.cls in (_NUM, _ID) and _is_numeric(tok):
            numbers.setdefault(sentence, set()).add(tok.key)
    return _Response(
        occurrences,
        frozenset(proper),
        frozenset(pairs),
        has_numbers,
        norm.lower(),
        tuple(parsed.sentence_starts),
        {s: frozenset(v) for s, v in names.items()},
        _entities(norm, parsed.sentence_starts),
        norm is not normalised,
        {s: frozenset(v) for s, v in numbers.items()},
    )


def _build_memory(tokens: Sequence[_Token], facts: tuple[_Memory, ...] = ()) -> _Memory:
    seen: dict[str, _Token] = {}
    for tok in tokens:
        old = seen.get(tok.key)
        if old is None or (old.alt, tok.weight) > (tok.alt, old.weight):
            seen[tok.key] = tok  # a term as written beats the same term as a concept
    order = list(dict.fromkeys(t.key for t in tokens))
    terms = tuple(seen[k] for k in order)
    # Pairs run over the memory's token sequence (units included: "45 minutes", "400 euros").
    seq = [t.key for t in tokens if t.cls != _GENERIC]
    pairs = tuple(
        dict.fromkeys(
            (a, b) if a < b else (b, a) for a, b in zip(seq, seq[1:], strict=False) if a != b
        )
    )
    return _Memory(terms, pairs, facts)


_FACT_RARE_WEIGHT = 1.4  # a clause with one distinctive word this rare still states a fact


def _is_fact(group: Sequence[_Token]) -> bool:
    core = [t for t in group if t.cls not in (_GENERIC, _UNIT) and not t.alt]
    return len(core) >= 2 or (len(core) == 1 and core[0].weight >= _FACT_RARE_WEIGHT)


_RELATIONS = (
    "friend|friends|sister|brother|mother|father|mum|mom|dad|parents?|wife|husband|partner|"
    "spouse|son|daughter|colleague|coworker|co-worker|boss|neighbou?r|cousin|aunt|uncle|"
    "grandmother|grandfather|grandma|grandpa|roommate|flatmate|housemate|classmate|"
    "girlfriend|boyfriend|niece|nephew|fiancee?|in-laws?|sibling"
)
_RELATION_RE = re.compile(
    r"\b(?:[Yy]our|[Hh]is|[Hh]er|[Tt]heir|[Mm]y|[Aa])\s+(?:\w+\s+)?(" + _RELATIONS + r")\b"
)
_POSSESSOR_RE = re.compile(r"\b([A-Z][a-z]+)'s\b")
_USER_WORDS = frozenset({"user", "users", "customer", "customers", "client", "clients", "my", "i"})

_SUBJECT_RE = re.compile(r"\s*(?:The\s+)?([A-Z][a-z]+)'s\b")
_USER_RE = re.compile(r"\b(?:[Uu]ser|I|my|me)\b")


@lru_cache(maxsize=4096)
def _prepare_memory(content: str, concepts: bool = True) -> _Memory:
    """A memory's terms, pairs, clauses and subject; cached, as one memory is injected into many
    responses (a _Memory is immutable)."""
    parsed = _tokenise(_normalise(content, concepts))
    groups: dict[int, list[_Token]] = {}
    for tok, clause in zip(parsed.tokens, parsed.clauses, strict=True):
        groups.setdefault(clause, []).append(tok)
    facts = tuple(_build_memory(group) for group in groups.values() if _is_fact(group))
    mem = _build_memory(parsed.tokens, facts if len(facts) >= 2 else ())
    subject = None
    m = _SUBJECT_RE.match(content)
    if m:
        subject = "user" if m.group(1).lower() in _USER_WORDS else _stem(m.group(1).lower())
    elif _USER_RE.search(content):
        subject = "user"
    return _Memory(mem.terms, mem.pairs, mem.facts, subject, retraction_cues(content))


class LexicalFeatures(NamedTuple):
    """What the lexical scorer measured for one (memory, response) pair.

    `score` and `reason` are its verdict; the rest are the sub-scores and flags behind it, all
    taken in the best window: coverage and proximity of the whole memory, the best clause's base
    score, the share of the memory's distinctive weight matched, the weight of its heaviest
    unmatched distinctive term, and the checks that fired."""

    score: float
    reason: str
    coverage: float = 0.0
    proximity: float = 0.0
    clause: float = 0.0
    core_share: float = 0.0
    missing_weight: float = 0.0
    core_terms: int = 0
    core_matched: int = 0
    contradiction: bool = False
    conflict: bool = False
    different_numbers: bool = False
    single_term: bool = False
    anchored: bool = False
    retraction: bool = False  # a "no longer true" cue in the window that the memory lacks
    memory_negated: bool = False
    quoted: bool = False
    other_number: bool = False  # a memory number is missing and the window has another one
    first_missing: bool = False  # the memory's first distinctive term is not in the window
    unaddressed: bool = False  # a memory about the user, a window that never says "you"
    negation_dropped: bool = False  # the memory's negated terms appear only un-negated
    cue_dropped: bool = False  # the memory's "no longer true" cue is not in the window
    impersonal: bool = False  # the window never says "you", "your", "we", "our", "us"
    related_share: float = 0.0  # share of the matched distinctive weight found as related words
    top_weight: float = 0.0  # weight of the heaviest distinctive term matched in the window
    name_missing: bool = False  # a name or identifier of the memory is not in the window
    name_swap: bool = False  # ... and the window names someone or something else


_YOU_RE = re.compile(r"\b(?:you|your|yours|we|our|ours|us)\b")


def _empty_features(reason: str, quoted: bool = False) -> LexicalFeatures:
    return LexicalFeatures(0.0, reason, quoted=quoted)


# --------------------------------------------------------------------------------------------
# The lexical scorer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LexicalScorer:
    """Weighted term coverage + phrase proximity, with anchor, negation and number checks.

    The memory is compared with its best window of `window_sentences` consecutive sentences of
    the response (the window where its terms' weight is highest), so that words scattered
    over a long answer do not add up to a reference. For the memory as a whole, and for each
    of its clauses when it states several facts:
      base      = coverage_weight · coverage + proximity_weight · proximity
      coverage  = Σ weight of the memory's terms found in the window / Σ weight of its terms
      proximity = share of the memory's adjacent term pairs found near each other (≤ 2 terms
                  apart, either order) in the response
      × single_term_factor when only one distinctive term matches and the memory has more
      × number_factor      when the memory has numbers, none match, and the response has some
      raised to anchor_score when an anchor (identifier, long non-year number) matches exactly
    score = max(whole, fact_factor · best clause), then
      × contradiction_factor when ≥ contradiction_share of the matched distinctive weight occurs
                             in the window only under a negation the memory does not have.
    REFERENCED when score ≥ threshold. The constants are explained in docs/DETECTION.md.

    Concepts (issue #18, feedback/data/detection_lexicon.txt): with `concepts`, a phrase of the
    lexicon ("reports to", "doesn't eat meat", "every other week"), a date, a spoken time or a
    duration is followed by its other wording ("manager", "vegetarian", "everyfortnightly",
    "2027-08-02", "09:30", "120 minutes"): an optional term of the memory, that stands in for
    the phrase's own words when they are missing and is not counted when they are all there.
    A word of the memory found only as a related word counts with partial credit: a lexicon
    "~" line or a WordNet synonym `related_credit`, a WordNet hypernym `hypernym_credit`, a
    hyponym `hyponym_credit` (0 turns each off).
    """

    threshold: float = 0.4
    coverage_weight: float = 0.6
    proximity_weight: float = 0.4
    window_sentences: int = 3
    single_term_factor: float = 0.5
    number_factor: float = 0.5
    anchor_score: float = 0.6
    fact_factor: float = 0.85
    contradiction_share: float = 0.3
    contradiction_factor: float = 0.25
    identifier_part_credit: float = 0.8
    conflict_factor: float = 0.3
    related_credit: float = 0.6
    hypernym_credit: float = 0.4
    hyponym_credit: float = 0.5
    concepts: bool = True

    def score(self, content: str, response: str) -> tuple[float, str]:
        return self.score_many([content], response)[0]

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]:
        prepared = _prepare_response(response, self.concepts)
        return [self._score(_prepare_memory(c, self.concepts), prepared) for c in contents]

    # -- internals -------------------------------------------------------------------------

    def _match(self, term: _Token, resp: _Response) -> _Match:
        where = resp.occurrences.get(term.key)
        if where:
            return 1.0, where
        if term.cls == _WORD:
            return self._related(term.key, resp)
        if term.cls != _ID:
            return _NO_MATCH
        # "registry.acme.io" inside "registry.acme.io/api:1.2"; only with a separator, so that
        # "x1" is not found inside "x1440".
        at = -1 if term.key.isalnum() else resp.text.find(term.key)
        if at >= 0:
            return 1.0, {bisect_right(resp.sentence_starts, at) - 1: _POS}
        hour = _FULL_HOUR_RE.fullmatch(term.key)
        late = _LATE_HHMM_RE.fullmatch(term.key)
        if late:  # "19:30" and "half past seven" (07:30)
            where = resp.occurrences.get(f"{int(late.group(1)) - 12:02d}:{late.group(2)}")
            if where:
                return self.identifier_part_credit, where
        if hour:  # "10:00" (from "10 a.m.") against a bare "before 10"; "20:00" and "8"
            h = int(hour.group(1))
            for bare in (str(h), str(h - 12) if h > 12 else ""):
                where = resp.occurrences.get(bare)
                if where:
                    return self.identifier_part_credit, where
        if term.parts:  # "PG 15" for "PG-15": every part present in one sentence
            found = [resp.occurrences.get(p, {}) for p in term.parts]
            common = set(found[0]).intersection(*found[1:])
            if common:
                merged: dict[int, int] = {}
                for sentence in common:
                    for f in found:
                        merged[sentence] = merged.get(sentence, 0) | f[sentence]
                return self.identifier_part_credit, merged
        return _NO_MATCH

    def _covered(self, mem: _Memory, matches: dict[str, _Match], window: int | None) -> set[str]:
        """Keys of the memory's terms that do not count in this window: the words of a phrase
        matched as its concept instead, and a concept whose phrase's words all matched as
        written (it would count the same evidence twice)."""
        covered: set[str] = set()
        for term in mem.terms:
            if not term.covers or not self._local(matches[term.key], window)[0]:
                continue
            if all(self._local(matches[k], window)[0] for k in term.covers if k in matches):
                covered.add(term.key)
            else:
                covered.update(term.covers)
        return covered

    def _related(self, key: str, resp: _Response) -> _Match:
        """A word found only as a related word: a lexicon "~" line or a WordNet synonym
        (related_credit), a WordNet hypernym or hyponym (hypernym_credit, hyponym_credit)."""
        credits = (self.related_credit, self.hypernym_credit, self.hyponym_credit)
        if not any(credits):
            return _NO_MATCH
        best = 0.0
        merged: dict[int, int] = {}
        for other, kind in _related_table().get(key, ()):
            credit = credits[kind]
            where = resp.occurrences.get(other) if credit else None
            if not where:
                continue
            if credit > best:
                best = credit
            for sentence, bits in where.items():
                merged[sentence] = merged.get(sentence, 0) | bits
        return (best, merged) if best else _NO_MATCH

    def _window(self, terms: Sequence[_Token], matches: dict[str, _Match]) -> int | None:
        """First sentence of the window where the memory's matched weight is highest."""
        totals: dict[int, float] = {}
        span = self.window_sentences
        for term in terms:
            credit, where = matches[term.key]
            if not credit:
                continue
            starts = {w for s in where for w in range(max(0, s - span + 1), s + 1)}
            for w in starts:
                totals[w] = totals.get(w, 0.0) + term.weight * credit
        if not totals:
            return None
        return max(sorted(totals), key=lambda w: totals[w])

    def _local(self, match: _Match, window: int | None) -> tuple[float, int]:
        """The match's credit and its occurrence bits inside the window."""
        credit, where = match
        if not credit or window is None:
            return 0.0, 0
        bits = 0
        for s in range(window, window + self.window_sentences):
            bits |= where.get(s, 0)
        return (credit, bits) if bits else (0.0, 0)

    def features_many(self, contents: Sequence[str], response: str) -> list[LexicalFeatures]:
        """The score, reason and the sub-scores and flags behind them, one per content (for
        scorers fitted on top of this one, feedback/detection_model.py)."""
        prepared = _prepare_response(response, self.concepts)
        return [self._analyse(_prepare_memory(c, self.concepts), prepared) for c in contents]

    def _score(self, mem: _Memory, resp: _Response) -> tuple[float, str]:
        features = self._analyse(mem, resp, extras=False)
        return features.score, features.reason

    def _analyse(self, mem: _Memory, resp: _Response, extras: bool = True) -> LexicalFeatures:
        """The score and reason, and (with `extras`) the window checks only a fitted model
        reads: "no longer" cues, "you" in the window, other numbers, the first term."""
        if not mem.terms:
            return _empty_features("no content terms in the memory")
        matches = {t.key: self._match(t, resp) for t in mem.terms}
        if not any(credit for credit, _ in matches.values()):
            return _empty_features("no shared content terms", quoted=resp.quoted)
        window = self._window(mem.terms, matches)
        score, detail, notes, coverage, proximity = self._base(mem, resp, matches, window)
        flags = set(notes)
        clause = 0.0
        for i, fact in enumerate(mem.facts, start=1):
            fact_window = self._window(fact.terms, matches)
            fact_score, fact_detail, fact_notes, _, _ = self._base(fact, resp, matches, fact_window)
            clause = max(clause, fact_score)
            if self.fact_factor * fact_score > score:
                score = self.fact_factor * fact_score
                detail = f"clause {i}/{len(mem.facts)}: {fact_detail}"
                notes = fact_notes
        # Contradiction: the response negates what the memory asserts ("Alice prefers Python"
        # vs "Alice does not use Python anymore"). A negated memory restated positively is not
        # checked: rules are usually applied by naming the alternative ("a PR, not main").
        matched_w = contradicted_w = flipped_w = negated_w = 0.0
        core_total = missing = 0.0
        core = core_matched = 0
        related_w = top_w = 0.0
        name_missing = False
        covered = self._covered(mem, matches, window)
        for term in mem.terms:
            credit, bits = self._local(matches[term.key], window)
            if term.cls in (_GENERIC, _UNIT) or term.key in covered or (term.alt and not credit):
                continue
            if credit and term.cls == _WORD and credit < 1.0:
                related_w += term.weight * credit
            if credit:
                top_w = max(top_w, term.weight * credit)
            elif term.cls in (_PROPER, _ID) or term.proper:
                name_missing = True
            core += 1
            core_total += term.weight
            if credit:
                core_matched += 1
                matched_w += term.weight * credit
                if not term.negated and bits == _NEG:
                    contradicted_w += term.weight * credit
                if term.negated:
                    negated_w += term.weight * credit
                    if bits == _POS:
                        flipped_w += term.weight * credit
            else:
                missing = max(missing, term.weight)
        contradiction = conflict = False
        if matched_w and contradicted_w / matched_w >= self.contradiction_share:
            score *= self.contradiction_factor
            contradiction = True
            notes = [*notes, "contradicts the memory: negated or no longer true in the response"]
        elif window is not None and score >= self.threshold * self.conflict_factor:
            note = self._conflict(mem, resp, matches, window)
            if note:
                score *= self.conflict_factor
                conflict = True
                notes = [*notes, note]
        if resp.quoted:
            notes = [*notes, "the quoted user question was ignored"]
        score = min(1.0, max(0.0, score))
        verdict = ">=" if score >= self.threshold else "<"
        reason = f"lexical {score:.2f} {verdict} {self.threshold:.2f}: {detail}"
        if notes:
            reason += "; " + "; ".join(notes)
        retraction = other_number = unaddressed = cue_dropped = impersonal = name_swap = False
        first_missing = True
        if extras and window is not None:
            starts = resp.sentence_starts
            end = window + self.window_sentences
            passage = resp.text[starts[window] : starts[end] if end < len(starts) else None]
            cues = retraction_cues(passage)
            retraction = bool(cues - mem.cues)
            cue_dropped = bool(mem.cues - cues)
            addressed = _YOU_RE.search(passage) is not None
            unaddressed = mem.subject == "user" and not addressed
            impersonal = not addressed
            keys = {t.key for t in mem.terms}
            numbers_in = set().union(*(resp.numbers_at.get(s, ()) for s in range(window, end)))
            other_number = bool(numbers_in - keys) and any(
                _is_numeric(t) and not t.alt and not self._local(matches[t.key], window)[0]
                for t in mem.terms
            )
            first = next(
                (t for t in mem.terms if t.cls not in (_GENERIC, _UNIT) and not t.alt), None
            )
            if name_missing:
                names_in = set().union(*(resp.names_at.get(s, ()) for s in range(window, end)))
                name_swap = bool(names_in - keys)
            first_missing = first is not None and not self._local(matches[first.key], window)[0]
        return LexicalFeatures(
            score=score,
            reason=reason,
            coverage=coverage,
            proximity=proximity,
            clause=clause,
            core_share=matched_w / core_total if core_total else 0.0,
            missing_weight=missing,
            core_terms=core,
            core_matched=core_matched,
            contradiction=contradiction,
            conflict=conflict,
            different_numbers="different numbers" in flags,
            single_term="single shared term" in flags,
            anchored="exact identifier/number match" in flags,
            retraction=retraction,
            memory_negated=any(t.negated for t in mem.terms),
            quoted=resp.quoted,
            other_number=other_number,
            first_missing=first_missing,
            unaddressed=unaddressed,
            negation_dropped=negated_w > 0 and flipped_w / negated_w >= self.contradiction_share,
            cue_dropped=cue_dropped,
            impersonal=impersonal,
            related_share=related_w / matched_w if matched_w else 0.0,
            top_weight=top_w,
            name_missing=name_missing,
            name_swap=name_swap,
        )

    def _conflict(
        self, mem: _Memory, resp: _Response, matches: dict[str, _Match], window: int
    ) -> str | None:
        """A different value or a different person where the memory's should be, or None."""
        sentences = range(window, window + self.window_sentences)
        keys = {t.key for t in mem.terms}
        matched = {t.key for t in mem.terms if self._local(matches[t.key], window)[0]}
        others = set().union(*(resp.others_at.get(s, ()) for s in sentences)) - keys
        if mem.subject and mem.subject != "user" and mem.subject not in matched:
            names = set().union(*(resp.names_at.get(s, ()) for s in sentences)) - keys
            if others or names:
                return f"about a different entity ({sorted(others or names)[0]}), not the memory's"
        if mem.subject == "user" and others:
            return f"about a different entity ({sorted(others)[0]}), not the user"
        missing = [
            t.key
            for t in mem.terms
            if (t.proper or t.key in resp.proper) and t.cls == _PROPER and t.key not in matched
        ]
        if missing and not mem.facts and matched - set(missing):
            names = set().union(*(resp.names_at.get(s, ()) for s in sentences)) - keys
            if names:
                return (
                    f"contradicts the memory: {sorted(names)[0]} where the memory has {missing[0]}"
                )
        return None

    def _base(
        self,
        mem: _Memory,
        resp: _Response,
        matches: dict[str, _Match],
        window: int | None,
    ) -> tuple[float, str, list[str], float, float]:
        """(score, detail, notes, coverage, proximity) of one memory (or clause) in a window."""
        total = matched_w = 0.0
        matched: list[str] = []
        support = distinctive = mem_numbers = numbers_matched = 0
        anchored = False
        dropped: set[str] = set()
        covered = self._covered(mem, matches, window)
        for term in mem.terms:
            credit, _ = self._local(matches[term.key], window)
            if term.key in covered or (term.alt and not credit):
                dropped.add(term.key)  # an unused alternative wording is not missing
                continue
            weight = term.weight
            if term.cls == _WORD and term.key in resp.proper:
                weight = _W_PROPER  # a name that happened to open the memory's sentence
            total += weight
            is_core = term.cls not in (_GENERIC, _UNIT)
            distinctive += is_core
            numeric = _is_numeric(term)
            mem_numbers += numeric
            if not credit:
                continue
            matched_w += weight * credit
            matched.append(term.key)
            numbers_matched += numeric
            support += is_core
            anchored = anchored or (credit == 1.0 and _is_anchor(term))
        coverage = matched_w / total if total else 0.0
        shown = ", ".join(matched[:6]) + (", ..." if len(matched) > 6 else "")
        detail = f"matched {len(matched)}/{len(mem.terms)} terms ({shown})"
        score = proximity = coverage
        pairs = mem.pairs
        if dropped:
            pairs = [p for p in pairs if p[0] not in dropped and p[1] not in dropped]
        if pairs:
            near = sum(1 for p in pairs if p in resp.pairs)
            proximity = near / len(pairs)
            score = self.coverage_weight * coverage + self.proximity_weight * proximity
            detail += f", near pairs {near}/{len(pairs)}"
        notes: list[str] = []
        if not support and not anchored:
            return 0.0, detail, ["only common words matched"], coverage, proximity
        if distinctive >= 2 and support < 2 and not anchored:
            score *= self.single_term_factor
            notes.append("single shared term")
        if mem_numbers and not numbers_matched and resp.has_numbers:
            score *= self.number_factor
            notes.append("different numbers")
        if anchored and score < self.anchor_score:
            score = self.anchor_score
            notes.append("exact identifier/number match")
        return score, detail, notes, coverage, proximity


DEFAULT_SCORER = LexicalScorer()

# The hand-labelled reference set (docs/DETECTION.md, "Reference set").
REFERENCE_SET = Path(__file__).resolve().parent / "data" / "detection_reference.jsonl"


def clear_caches() -> None:
    """Empty the word caches (for cold-start timing; results never depend on them)."""
    _stem.cache_clear()
    _lex.cache_clear()
    _negate.cache_clear()
    _prepare_memory.cache_clear()


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def analyse(
    response_text: str,
    objects: Sequence[DetectionInput],
    scorer: Scorer | None = None,
    threshold: float | None = None,
) -> list[Detection]:
    """One Detection per object, in the given order: REFERENCED when score >= threshold.

    `threshold` overrides the scorer's own. Scores are clamped to [0, 1].
    """
    if not objects:
        return []
    scorer = scorer or DEFAULT_SCORER
    cut = scorer.threshold if threshold is None else threshold
    contents = [o.content for o in objects]
    if isinstance(scorer, BatchScorer):
        results = scorer.score_many(contents, response_text)
    else:
        results = [scorer.score(c, response_text) for c in contents]
    detections = []
    for obj, (raw, reason) in zip(objects, results, strict=True):
        score = min(1.0, max(0.0, float(raw)))
        signal: SignalType = REFERENCED if score >= cut else UNUSED
        detections.append(Detection(obj.object_id, signal, round(score, 4), reason))
    return detections
