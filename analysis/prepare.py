"""A response and a memory prepared once for scoring: where each term occurs (sentence and
negation), near pairs, names, numbers and other people per sentence; a memory's terms, pairs,
clauses, subject and cues. A memory's preparation is cached, as one memory is injected into many
responses.

Pure module: stdlib only, no Django import, deterministic."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from analysis.concepts import SYNONYMS
from analysis.normalise import normalise
from analysis.text import retraction_cues, strip_quoted_question
from analysis.tokens import _GENERIC, _ID, _NUM, _UNIT, _W_PROPER, _Token, _tokenise
from analysis.words import (
    GENERIC_WORDS,
    HAS_DIGIT_RE,
    MONTHS,
    STOP_WORDS,
    stem_of,
    swap_members,
    word_set,
)

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

    def passage(self, first: int, sentences: int) -> str:
        """The text of ``sentences`` sentences from ``first`` on (normalised, lower case)."""
        starts = self.sentence_starts
        end = first + sentences
        return self.text[starts[first] : starts[end] if end < len(starts) else None]


@dataclass(frozen=True, slots=True)
class _Memory:
    terms: tuple[_Token, ...]  # de-duplicated content terms, in order
    pairs: tuple[tuple[str, str], ...]  # adjacent non-generic terms, unordered
    facts: tuple[_Memory, ...] = ()  # its clauses, when it states several facts
    subject: str | None = None  # "user", a possessor's key ("alice"), or None
    cues: frozenset[str] = frozenset()  # its own "no longer true" cues (retraction_cues)
    members: tuple[tuple[str, frozenset[str]], ...] = ()  # closed-class words (swap_members)


# A match: credit in [0, 1] (1.0 = exact) and where it occurred: {sentence: bits}.
_Match = tuple[float, dict[int, int]]
_NO_MATCH: _Match = (0.0, {})


def _is_numeric(tok: _Token) -> bool:
    return tok.cls == _NUM or (tok.cls == _ID and HAS_DIGIT_RE.search(tok.key) is not None)


def _is_anchor(tok: _Token) -> bool:
    """A term specific enough that finding it verbatim is evidence of use on its own:
    identifiers (KX-48213, 2027-02-28, eu-west-1, max_connections, a@b.io) and long
    numbers that are not years (5433, 62000)."""
    if tok.cls == _ID:
        return len(tok.key) >= 4 and (
            HAS_DIGIT_RE.search(tok.key) is not None or any(c in tok.key for c in "._@/")
        )
    return (
        tok.cls == _NUM
        and tok.key.isdigit()
        and len(tok.key) >= 4
        and not (len(tok.key) == 4 and _YEAR_RE.fullmatch(tok.key))
    )


_DAYS = word_set(
    "monday tuesday wednesday thursday friday saturday sunday today tomorrow yesterday "
    "christmas easter"
)
_DAY_STEMS = frozenset(stem_of(w) for w in _DAYS | MONTHS)


def _entities(norm: str, starts: Sequence[int]) -> dict[int, frozenset[str]]:
    """Per sentence: people other than the reader the text attributes things to."""
    found: dict[int, set[str]] = {}
    for m in _POSSESSOR_RE.finditer(norm):
        low = m.group(1).lower()
        if low in STOP_WORDS or low in GENERIC_WORDS or low in _DAYS or low in MONTHS:
            continue
        found.setdefault(bisect_right(starts, m.start()) - 1, set()).add(stem_of(low))
    for m in _RELATION_RE.finditer(norm):
        low = m.group(1).lower()
        found.setdefault(bisect_right(starts, m.start()) - 1, set()).add(
            stem_of(SYNONYMS.get(low, low))
        )
    return {s: frozenset(v) for s, v in found.items()}


def _prepare_response(response: str, concepts: bool = True) -> _Response:
    normalised = normalise(response, concepts)
    norm = strip_quoted_question(normalised)
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
    normalised = normalise(content, concepts)
    parsed = _tokenise(normalised)
    groups: dict[int, list[_Token]] = {}
    for tok, clause in zip(parsed.tokens, parsed.clauses, strict=True):
        groups.setdefault(clause, []).append(tok)
    facts = tuple(_build_memory(group) for group in groups.values() if _is_fact(group))
    mem = _build_memory(parsed.tokens, facts if len(facts) >= 2 else ())
    subject = None
    m = _SUBJECT_RE.match(content)
    if m:
        subject = "user" if m.group(1).lower() in _USER_WORDS else stem_of(m.group(1).lower())
    elif _USER_RE.search(content):
        subject = "user"
    return _Memory(
        mem.terms,
        mem.pairs,
        mem.facts,
        subject,
        retraction_cues(content),
        tuple(swap_members(normalised.lower()).items()),
    )
