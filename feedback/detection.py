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
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from feedback.detection_text import (
    FULL_HOUR_RE,
    LATE_HHMM_RE,
    MARK_BASE,
    MARK_HIGH,
    MARK_LOW,
    SYNONYMS,
    normalise,
    related_table,
    retraction_cues,
    strip_quoted_question,
)
from feedback.detection_words import (
    CHANGE_STOPS,
    CHANGE_VERBS,
    CLAUSE_PUNCT,
    CLAUSE_WORDS,
    CLITICS,
    CONTRACTION_BASE,
    DECIMAL_RE,
    FACT_SPLIT_WORDS,
    FROM_WORDS,
    GENERIC_STEMS,
    GENERIC_WORDS,
    GIVE_UP,
    HAS_DIGIT_RE,
    MONTHS,
    MOVE_VERBS,
    NEGATION_CUES,
    NEGATION_VERBS,
    NEGATION_WINDOW,
    NP_NEGATIONS,
    NUMBER_WORDS,
    ORDINAL_RE,
    PASSIVE,
    PAST_CUES,
    PHRASE_STOPS,
    POSTFIX_CUES,
    SENTENCE_END,
    SENTENCE_PUNCT,
    SEPARATORS,
    SPLIT_RE,
    STOP_WORDS,
    TOKEN_SPLIT_RE,
    UNIT_CANON,
    UNIT_STEMS,
    stem_of,
    swap_members,
    word_set,
)

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


# Token classes and their weights (see docs/DETECTION.md, "Features and weights").
_GENERIC = "generic"  # user, prefer, use ...          weight 0.3, never a match on its own
_UNIT = "unit"  # minute, euro, kg ...                  weight 0.5, never a match on its own
_WORD = "word"  # any other content word                weight by its frequency (below)
_PROPER = "proper"  # capitalised mid-sentence          weight 2.0; ALL-CAPS acronym 1.5
_NUM = "num"  # 45, 3.2, 2027, "five"                   weight 2.0; >= 3 digits or decimal 2.5
_ID = "id"  # PG-15, eu-west-1, a@b.io, 1.4.2, X1, 9:15  weight 3.0

_W_GENERIC = 0.3
_W_UNIT = 0.5
_W_PROPER = 2.0
_W_ACRONYM = 1.5
_W_NUM = 2.0
_W_NUM_DISTINCT = 2.5
_W_ID = 3.0


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
# Word weights from word frequencies
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
    m = ORDINAL_RE.fullmatch(low)
    if m:
        return _Token(m.group(1), _NUM, _W_NUM, negated, False)
    if low in NUMBER_WORDS:
        return _Token(NUMBER_WORDS[low], _NUM, _W_NUM, negated, False)
    if HAS_DIGIT_RE.search(low):  # B2, X1, 5k, A350, 2560x1440
        return _Token(low, _ID, _W_ID, negated, False)
    if len(low) < 2 or not low.isalpha():
        return None
    capitalised = raw[0].isupper()
    if low in STOP_WORDS and not (capitalised and low in MONTHS and not sentence_start):
        return None
    low = UNIT_CANON.get(low, low)
    weight = _idf_weight(low)
    low = SYNONYMS.get(low, low)
    key = stem_of(low)
    if key in GENERIC_STEMS:
        return _Token(key, _GENERIC, _W_GENERIC, negated, False)
    if key in UNIT_STEMS:
        return _Token(key, _UNIT, _W_UNIT, negated, False)
    if len(raw) >= 2 and raw.isupper():
        return _Token(key, _PROPER, _W_ACRONYM, negated, True)
    if capitalised and not sentence_start:
        return _Token(key, _PROPER, _W_PROPER, negated, True)
    return _Token(key, _WORD, weight, negated, False)


def _split_compound(raw: str, negated: bool, sentence_start: bool) -> list[_Token]:
    """Tokens for a raw token with separators: a decimal, an identifier, or hyphenated words."""
    if DECIMAL_RE.fullmatch(raw):
        return [_Token(raw, _NUM, _W_NUM_DISTINCT, negated, False)]
    parts = [p for p in SPLIT_RE.split(raw) if p]
    hyphen_only = all(sep == "-" for sep in re.findall(r"[.\-/@:+_]", raw))
    words_after = all(p.isalpha() for p in parts[1:])
    lead_number = parts and (parts[0].isdigit() or parts[0].lower() in NUMBER_WORDS)
    if hyphen_only and all(p.isalpha() for p in parts):
        lows = [p.lower() for p in parts]
        if any(w in STOP_WORDS or stem_of(w) in GENERIC_STEMS for w in lows):
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
            raw = low = CONTRACTION_BASE.get(base, base)
            cue = True
        else:
            for clitic in CLITICS:
                if low.endswith(clitic):
                    raw = raw[: -len(clitic)]
                    low = low[: -len(clitic)]
                    break
            raw = raw.replace("'", "")
            low = low.replace("'", "")
    if not raw:
        return (), low, cue
    if not raw.isalnum() and SEPARATORS.intersection(raw):
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
    pieces = TOKEN_SPLIT_RE.split(text)
    pos = 0
    for i in range(1, len(pieces), 2):
        gap = pieces[i - 1]
        raw = pieces[i]
        start = pos + len(gap)
        pos = start + len(raw)
        if gap == " ":
            sentence_start = prev_low == ""
        else:
            sentence_start = (prev_low == "") or not SENTENCE_PUNCT.isdisjoint(gap)
            if not CLAUSE_PUNCT.isdisjoint(gap) or " - " in gap:
                neg_left = 0
                scope_start = len(tokens)
                clause += 1
                if tokens and not SENTENCE_END.isdisjoint(gap):
                    sentence_starts.append(start)
                    sentence += 1
        lexed, low, cue = _lex(raw, sentence_start)
        if gap == " " or not gap or not MARK_LOW <= gap[-1] <= MARK_HIGH:
            piece_starts.append(len(tokens))  # words of the text only, not written concepts
        else:  # a concept written by the lexicon
            code = ord(gap[-1]) - MARK_BASE
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
        if low in CLAUSE_WORDS:
            neg_left = 0
            scope_start = len(tokens)
        elif neg_left and low in neg_stops:
            neg_left = 0  # "switched from Jenkins to GitHub Actions": the scope ends at "to"
        if low in FACT_SPLIT_WORDS:
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
            or low in NEGATION_CUES
            or low in NEGATION_VERBS
            or low in PAST_CUES
            or (low == "up" and prev_low in GIVE_UP)
            or (low == "to" and prev_low == "used")  # "you used to live in Berlin"
        ):
            neg_left = NEGATION_WINDOW
            # "no" and "without" deny a noun phrase: "no lift to your flat" says nothing
            # against the flat.
            neg_stops = PHRASE_STOPS if low in NP_NEGATIONS else frozenset()
        elif low in CHANGE_VERBS or (low in FROM_WORDS and prev_low in MOVE_VERBS):
            neg_left = NEGATION_WINDOW  # "replaced Jenkins with ...", "moved from Berlin to"
            neg_stops = CHANGE_STOPS
        if low in POSTFIX_CUES or (low in CHANGE_VERBS and prev_low in PASSIVE):
            # "Jenkins has been retired", "isn't your favourite anymore": back to clause start
            for j in range(max(scope_start, len(tokens) - NEGATION_WINDOW), len(tokens)):
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
    class_swap: bool = False  # another member of a closed class in the window, none of the memory's


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

    Concepts (feedback/data/detection_lexicon.txt): with `concepts`, a phrase of the
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

    def _match(self, term: _Token, resp: _Response, own: frozenset[str]) -> _Match:
        """How ``term`` occurs in the response; ``own``: the memory's other terms' keys."""
        where = resp.occurrences.get(term.key)
        if where:
            return 1.0, where
        if term.cls == _WORD:
            return self._related(term.key, resp, own)
        if term.cls != _ID:
            return _NO_MATCH
        # "registry.acme.io" inside "registry.acme.io/api:1.2"; only with a separator, so that
        # "x1" is not found inside "x1440".
        at = -1 if term.key.isalnum() else resp.text.find(term.key)
        if at >= 0:
            return 1.0, {bisect_right(resp.sentence_starts, at) - 1: _POS}
        hour = FULL_HOUR_RE.fullmatch(term.key)
        late = LATE_HHMM_RE.fullmatch(term.key)
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

    def _related(self, key: str, resp: _Response, own: frozenset[str]) -> _Match:
        """A word found only as a related word: a lexicon "~" line or a WordNet synonym
        (related_credit), a WordNet hypernym or hyponym (hypernym_credit, hyponym_credit).
        A word that is itself one of the memory's terms (``own``) is that term's evidence, not
        this one's: "dog" in the response does not also stand for the memory's "poodle"."""
        credits = (self.related_credit, self.hypernym_credit, self.hyponym_credit)
        if not any(credits):
            return _NO_MATCH
        best = 0.0
        merged: dict[int, int] = {}
        for other, kind in related_table().get(key, ()):
            credit = credits[kind]
            where = resp.occurrences.get(other) if credit and other not in own else None
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
        own = frozenset(t.key for t in mem.terms)
        matches = {t.key: self._match(t, resp, own) for t in mem.terms}
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
        class_swap = False
        first_missing = True
        if extras and window is not None:
            end = window + self.window_sentences
            passage = resp.passage(window, self.window_sentences)
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
            if mem.members:
                found = swap_members(passage)
                class_swap = any(
                    name in found and not words & found[name] for name, words in mem.members
                )
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
            class_swap=class_swap,
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
            # a name that begins the missing one, or that it begins, is the same one shortened
            # or extended ("Fuji" for "Fujifilm"), not another
            names = {
                n for n in names if not any(n.startswith(m) or m.startswith(n) for m in missing)
            }
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


def warm() -> None:
    """Load what the first analysis would otherwise load on the request path: the word
    frequencies and the WordNet table (about 0.8 s together). Web and worker processes call
    this as they start (``rms.gunicorn_conf``, ``feedback.tasks``); results never depend on it."""
    _frequencies()
    related_table()


def clear_caches() -> None:
    """Empty the word caches (for cold-start timing; results never depend on them)."""
    stem_of.cache_clear()
    _lex.cache_clear()
    _negate.cache_clear()
    _prepare_memory.cache_clear()


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


#: The bounds of one analysis, on the API (a session with ``detect``, POST /detect). Its cost grows
#: with the response's length times the objects scored: at the bounds about a second of CPU
#: (bench/bench_detect_feed.py). 32,000 characters is about 8,000 tokens, a long LLM answer;
#: 200 objects is a large memory bundle and the /detect endpoint's earlier list bound.
MAX_RESPONSE_CHARS = 32_000
MAX_OBJECTS = 200


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
