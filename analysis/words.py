"""The response analyser's vocabulary and stemmer (``analysis.lexical``): general English
word lists, the token patterns, and the suffix stripper that maps a word to its matching key.

Pure module: stdlib only, no Django import. The lists are general English, not taken from the
labelled sets (SWAP_CLASSES says which of its classes their errors suggested).
"""

from __future__ import annotations

import re
from functools import lru_cache


def word_set(text: str) -> frozenset[str]:
    """A word list written as whitespace-separated text."""
    return frozenset(text.split())


# --------------------------------------------------------------------------------------------
# Lexicon: small, general-purpose English lists, not derived from the reference set.
# --------------------------------------------------------------------------------------------

STOP_WORDS = word_set(
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
GENERIC_WORDS = word_set(
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
_UNIT_WORDS = word_set(
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
UNIT_CANON = {
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
NUMBER_WORDS = {
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
    "seventy": "70",
    "eighty": "80",
    "ninety": "90",
    "hundred": "100",
    # ordinals ("her ninetieth" = "turns 90"); not "first" and "second" (a unit, an idiom)
    "third": "3",
    "fourth": "4",
    "fifth": "5",
    "sixth": "6",
    "seventh": "7",
    "eighth": "8",
    "ninth": "9",
    "tenth": "10",
    "eleventh": "11",
    "twelfth": "12",
    "twentieth": "20",
    "thirtieth": "30",
    "fortieth": "40",
    "fiftieth": "50",
    "sixtieth": "60",
    "seventieth": "70",
    "eightieth": "80",
    "ninetieth": "90",
    "hundredth": "100",
    "thousand": "1000",
}

# Month names stay content words even when they collide with a stop word ("May").
MONTHS_IN_ORDER = (
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
MONTHS = frozenset(MONTHS_IN_ORDER)

# Closed classes of alternatives: two members of one class name different values of the same
# slot ("Saturdays" / "Sundays", "staging" / "production", "violin" / "viola"), so a response that
# drops the memory's member and names another of its class is about something else. General
# English lists, though which classes to list was chosen from the tuning sets' false positives
# (DETECTION.md round 6); "may" and "march" are left out of the months (verbs too). Plurals are
# folded and a few familiar forms read as their member (SWAP_ALIASES: "mum" is "mother").
SWAP_CLASSES: dict[str, frozenset[str]] = {
    name: word_set(words)
    for name, words in {
        "weekday": "monday tuesday wednesday thursday friday saturday sunday",
        "month": "january february april june july august september october november december",
        "season": "spring summer autumn winter",
        "meal": "breakfast brunch lunch dinner supper",
        "environment": "staging production prod dev development sandbox qa",
        "relative": """son daughter brother sister mother father wife husband aunt uncle niece
            nephew grandmother grandfather granddaughter grandson cousin stepson stepdaughter""",
        "colour": "red blue green yellow black white orange purple pink gray brown",
        "direction": "north south east west northern southern eastern western",
        "instrument": """piano violin viola cello guitar flute clarinet trumpet trombone drum
            saxophone harp oboe ukulele""",
        "appliance": """oven fridge freezer dishwasher microwave kettle toaster dryer hob fryer
            cooker blender""",
        "allergen": """peanut almond walnut cashew hazelnut pecan pistachio sesame gluten dairy
            lactose shellfish soy egg wheat""",
        "pet": "dog cat rabbit hamster parrot horse budgie tortoise ferret",
        "tier": "premium enterprise gold silver bronze platinum",
        "browser": "chrome firefox safari",
        "os": "windows macos linux ubuntu android ios",
    }.items()
}
SWAP_ALIASES = {
    "mum": "mother",
    "mom": "mother",
    "mummy": "mother",
    "dad": "father",
    "daddy": "father",
    "grandma": "grandmother",
    "granny": "grandmother",
    "nan": "grandmother",
    "grandpa": "grandfather",
    "grandad": "grandfather",
    "prod": "production",
    "dev": "development",
    "grey": "gray",
    "jan": "january",
    "feb": "february",
    "apr": "april",
    "jun": "june",
    "jul": "july",
    "aug": "august",
    "sep": "september",
    "sept": "september",
    "oct": "october",
    "nov": "november",
    "dec": "december",
}
SWAP_MEMBER: dict[str, str] = {w: name for name, ws in SWAP_CLASSES.items() for w in ws}
SWAP_MEMBER.update({alias: SWAP_MEMBER[word] for alias, word in SWAP_ALIASES.items()})


_PRE_PRODUCTION_RE = re.compile(r"\bpre-?prod(?:uction)?\b")
# A rate's unit ("per minute", "a day", "every week", "/hour", "monthly"): the class "rate".
_RATE_RE = re.compile(
    r"(?:\b(?:per|an?|each|every)\s+|/)(minute|hour|day|week|fortnight|month|quarter|year)s?\b"
    r"|(?:\bper\s+|/)(second)s?\b"
)
_RATE_WORDS = {
    "hourly": "hour",
    "daily": "day",
    "weekly": "week",
    "fortnightly": "fortnight",
    "monthly": "month",
    "quarterly": "quarter",
    "annually": "year",
    "annual": "year",
    "yearly": "year",
}


def swap_members(text: str) -> dict[str, frozenset[str]]:
    """The closed-class words of a (lower-cased) text, by class; a plural counts as its
    singular ("saturdays" -> "saturday"); the units of rates are the class "rate"."""
    out: dict[str, set[str]] = {}
    text = _PRE_PRODUCTION_RE.sub("staging", text)
    words = re.findall(r"[a-z]+", text)
    for word in words:
        if word not in SWAP_MEMBER and word.endswith("s") and word[:-1] in SWAP_MEMBER:
            word = word[:-1]
        name = SWAP_MEMBER.get(word)
        if name is not None:
            out.setdefault(name, set()).add(SWAP_ALIASES.get(word, word))
    rates = {f"per {a or b}" for a, b in _RATE_RE.findall(text)}
    rates.update(f"per {_RATE_WORDS[w]}" for w in words if w in _RATE_WORDS)
    if rates:
        out["rate"] = rates
    return {name: frozenset(ws) for name, ws in out.items()}


# Negation cues. "n't" contractions are turned into the cue "not" by the tokenizer.
NEGATION_CUES = frozenset({"not", "no", "never", "without", "nor", "neither", "none", "cannot"})
NEGATION_VERBS = frozenset({"stopped", "quit", "quitting"})  # "stopped taking X" negates X
GIVE_UP = frozenset({"give", "gave", "given", "giving"})  # "gave up X" negates X
# Cues of a state that is over (a past state is not a current one): "formerly", "used to",
# "no longer", "anymore"...
PAST_CUES = frozenset({"formerly", "previously", "former", "once-", "ex"})
POSTFIX_CUES = frozenset({"anymore", "discontinued", "deprecated"})
CHANGE_VERBS = frozenset(
    {"replaced", "retired", "dropped", "ditched", "abandoned", "removed", "scrapped", "cancelled"}
)
PASSIVE = frozenset({"been", "was", "were", "is", "are", "got", "be"})
MOVE_VERBS = frozenset(
    {"switched", "switching", "moved", "moving", "migrated", "migrating", "changed", "away"}
)
FROM_WORDS = frozenset({"from"})
CHANGE_STOPS = frozenset({"to", "into", "onto", "with", "by", "for", "towards"})
NP_NEGATIONS = frozenset({"no", "without"})
PHRASE_STOPS = CHANGE_STOPS | frozenset({"in", "on", "at", "from", "after", "before", "so"})
# A negation reaches at most this many tokens, and stops at a clause boundary.
NEGATION_WINDOW = 6
CLAUSE_WORDS = word_set(
    """
    but so because since although though while whereas however instead rather unless which
    """
)
CLAUSE_PUNCT = frozenset(',;:.!?()[]{}"—–\n')
# A memory that states several facts is split into clauses here; using one of them is a use.
FACT_SPLIT_WORDS = frozenset({"and", "but", "while", "whereas", "which", "plus"})
SENTENCE_PUNCT = frozenset('.!?:;\n"`*•—–')  # a capital after these may not be a name
SENTENCE_END = frozenset(".!?\n")

CONTRACTION_BASE = {"ca": "can", "wo": "will", "sha": "shall", "ai": "is"}
CLITICS = ("'s", "'re", "'ve", "'ll", "'d", "'m")

TOKEN_SPLIT_RE = re.compile(r"(\w+(?:'\w+)?(?:[.\-/@:+]\w+(?:'\w+)?)*)")
THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
SPLIT_RE = re.compile(r"[.\-/@:+_]")
DECIMAL_RE = re.compile(r"\d+\.\d+")
ORDINAL_RE = re.compile(r"(\d+)(?:st|nd|rd|th)")
HAS_DIGIT_RE = re.compile(r"\d")
COMBINING_RE = re.compile(r"[\u0300-\u036f]+")
SEPARATORS = frozenset(".-/@:+_")


# --------------------------------------------------------------------------------------------
# Stemming
# --------------------------------------------------------------------------------------------

_NO_ING_STRIP = word_set(
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
def stem_of(word: str) -> str:
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


GENERIC_STEMS = frozenset(stem_of(w) for w in GENERIC_WORDS)
UNIT_STEMS = frozenset(stem_of(UNIT_CANON.get(w, w)) for w in _UNIT_WORDS)
