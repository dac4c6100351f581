"""Text normalisation before the response analyser tokenises: one spelling for one quantity,
date or time; the quoted user question; the "no longer true" cues. ``analysis.normalise`` runs
it, then the concept stage (``analysis.concepts``). Pure module: stdlib only, no Django import,
deterministic.
"""

from __future__ import annotations

import re

from analysis.words import (
    CHANGE_VERBS,
    HAS_DIGIT_RE,
    NEGATION_VERBS,
    PAST_CUES,
    POSTFIX_CUES,
)

# --------------------------------------------------------------------------------------------
# Number and unit normalisation: one spelling for one quantity, so "5 pm" in a memory matches
# "17:00" in a response
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
FULL_HOUR_RE = re.compile(r"(\d\d):00")
LATE_HHMM_RE = re.compile(r"(1[3-9]|2[0-3]):(\d\d)")
_CURRENCY_RE = re.compile(
    r"([€$£¥])\s?(\d+(?:\.\d+)?)(\s?(?:[kKmM]|million|thousand|billion|bn)\b)?"
)
_CURRENCY_WORD = {"€": "euros", "$": "dollars", "£": "pounds", "¥": "yen"}
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
# One pass for the digit forms; the first alternative that matches wins. Clock times: 5 pm, 5pm,
# 5:30 p.m., 11 AM -> 17:00, 17:30, 11:00; 9:05 -> 09:05. Scaled: 3k, 2 million -> 3000, 2000000.
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


# "eighteen hundred and fifty", "a hundred and twenty", "one hundred forty-two" (after the tens
# and teens above are digits): the whole number. A bare "two hundred" is left to _SPELLED_RE.
# The pattern opens with "hundred" (a literal is found fast); the word before it is checked after.
_HUNDREDS_RE = re.compile(
    r"hundred(?:(?: and)? (\d{1,2}|" + "|".join([*_ONES, *_TENS]) + r"))?\b(?![-\w])",
    re.IGNORECASE,
)
_HUNDREDS_LEAD_RE = re.compile(r"(?<![\w-])(a|" + "|".join(_ONES) + r"|\d{1,2}) $", re.IGNORECASE)


def _hundreds(text: str) -> str:
    out: list[str] = []
    last = 0
    for m in _HUNDREDS_RE.finditer(text):
        lead = _HUNDREDS_LEAD_RE.search(text, max(last, m.start() - 6), m.start())
        rest = m.group(1)
        if lead is None or (rest is None and not lead.group(1).isdigit()):
            continue
        word = lead.group(1).lower()
        value = 100 * (1 if word == "a" else _ONES.get(word) or int(word))
        if rest is not None:
            rest = rest.lower()
            value += _ONES.get(rest) or _TENS.get(rest) or int(rest)
        out.append(text[last : lead.start()])
        out.append(str(value))
        last = m.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


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
    if "hundred" in low:
        text = _hundreds(text)
    if not HAS_DIGIT_RE.search(text):
        return text
    if "€" in text or "$" in text or "£" in text or "¥" in text:
        text = _CURRENCY_RE.sub(_currency, text)
    text = _QUANTITY_RE.sub(_quantity, text)
    if "%" not in text:
        return text
    return _PERCENT_RE.sub(r"\1 percent", text)


_NUMBER_WORD_HINT_RE = re.compile(r"(?:" + "|".join([*_TEENS, *_TENS]) + r")")


# --------------------------------------------------------------------------------------------
# The quoted user question: a response that repeats the question is not using the memory
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


def strip_quoted_question(text: str) -> str:
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
    Public for other scorers (analysis/embedding.py), so that the rule lives here only."""
    return strip_quoted_question(text.replace("’", "'").replace("‘", "'"))


_RETRACTION_WORD_RE = re.compile(r"[a-z]+")
_RETRACTION_WORDS = NEGATION_VERBS | PAST_CUES | POSTFIX_CUES | CHANGE_VERBS


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
