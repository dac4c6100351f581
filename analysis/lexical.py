"""The lexical scorer: weighted term coverage and phrase proximity of a memory in its best window
of the response, with anchor, negation, number, entity and clause checks (``LexicalScorer``), and
the features behind each verdict (``LexicalFeatures``) that the fitted scorer reads.

The analysis is tuned for precision (SPEC.md §2 classes `response_analysis` as LOW reliability
and halves its weight; RFC-0009 §4 calls it best-effort): a REFERENCED it reports should usually
be a real use, and a missed paraphrase only costs a small γ that a stronger signal can provide.

Pure module: stdlib only, no Django import, deterministic (no randomness, no dict-order
dependence in the result). docs/DETECTION.md describes the method, its weights and threshold and
the measured precision/recall on analysis/data/detection_reference.jsonl.

The default scorer is lexical (`LexicalScorer`); any object with a `threshold` and a
`score(content, response) -> (score, reason)` method can be plugged in instead (`Scorer`), e.g. an
embedding model where one is installed. A scorer that also has `score_many(contents, response)`
is called once per response, so it can prepare the response a single time.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from analysis.concepts import related_table
from analysis.prepare import (
    _NEG,
    _NO_MATCH,
    _POS,
    _is_anchor,
    _is_numeric,
    _Match,
    _Memory,
    _prepare_memory,
    _prepare_response,
    _Response,
)
from analysis.text import FULL_HOUR_RE, LATE_HHMM_RE, retraction_cues
from analysis.tokens import _GENERIC, _ID, _PROPER, _UNIT, _W_PROPER, _WORD, _Token
from analysis.words import swap_members


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

    Concepts (analysis/data/detection_lexicon.txt): with `concepts`, a phrase of the
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
        scorers fitted on top of this one, analysis/model.py)."""
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
