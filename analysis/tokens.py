"""Tokenising a normalised text for the lexical scorer: token classes and their weights, word
weights from word frequencies, identifiers, compounds, negation scopes, sentences and clauses.

Pure module: stdlib only (and the wordfreq table, loaded on first use), no Django import,
deterministic."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from analysis.concepts import MARK_BASE, MARK_HIGH, MARK_LOW, SYNONYMS
from analysis.words import (
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
)

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
