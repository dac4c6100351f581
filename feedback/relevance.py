"""Domain relevance check and the IGNORED_REPEATEDLY decision (SPEC §9, RFC-0009 §7).

Pure: plain values in, plain values out, no Django import. The sweep task loads an object's facts
and its streak sessions, calls :func:`classify` per session (on a :class:`Context` it keeps per
session and a :class:`Subject` per object) and :func:`sweep_decision` once, and writes the
IGNORED_CHECK (and, if applied, the PENALTY) operation from the result.

Why a relevance check at all: an object injected five times and never used may simply have been
injected into conversations about something else; that says nothing about the object (RFC-0009
§7). Only sessions that were about the object's domain — or that we cannot tell about — count
toward the penalty.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

RELEVANT = "relevant"
IRRELEVANT = "irrelevant"
UNKNOWN = "unknown"
CLASSIFICATIONS = (RELEVANT, IRRELEVANT, UNKNOWN)

#: SPEC §9 default (namespace setting): Jaccard index at or above this makes a session relevant.
DEFAULT_JACCARD_THRESHOLD = 0.2
#: SPEC §9 default N (namespace setting): streak length that triggers the check.
DEFAULT_STREAK_THRESHOLD = 5

DOMAIN_CHECK_PASSED = "passed"
DOMAIN_CHECK_FAILED = "failed"
DOMAIN_CHECK_SKIPPED = "skipped"
DOMAIN_CHECK_NOT_RUN = "not_run"

#: English stop words removed before the Jaccard comparison (SPEC §9). The base is NLTK's widely
#: used English list (articles, pronouns, auxiliaries, prepositions, conjunctions, common adverbs,
#: and the fragments a word tokeniser makes of contractions: "don't" → "don", "t"; "we'll" → "we",
#: "ll"), plus the modals it lacks (could, would, might, must, shall), "also", "us" and a few
#: conversational fillers (ok, okay, please, thanks, yes). Function words carry no topic, and
#: keeping them would make any two English sentences look similar. Negations ("not", "no") are
#: stop words too: they change meaning, not topic.
_STOP_WORDS_TEXT = """
    a about above after again against ain all also am an and any are aren as at
    be because been before being below between both but by
    can couldn could d did didn do does doesn doing don down during
    each few for from further
    had hadn has hasn have haven having he her here hers herself him himself his how
    i if in into is isn it its itself just
    ll m ma me might mightn more most must mustn my myself
    needn no nor not now o of off on once only or other our ours ourselves out over own
    re s same shall shan she should shouldn so some such
    t than that the their theirs them themselves then there these they this those through to too
    under until up us ve very was wasn we were weren what when where which while who whom why
    will with won would wouldn y you your yours yourself yourselves
    ok okay please thanks yes
"""
STOP_WORDS: frozenset[str] = frozenset(_STOP_WORDS_TEXT.split())

#: Tokenisation: maximal runs of Unicode letters and digits (underscore excluded), so
#: "Postgres-16's WAL" → "postgres", "16", "s", "wal".
_WORD_RE = re.compile(r"[^\W_]+")


def word_set(text: str | None) -> frozenset[str]:
    """The lower-cased, stop-word-filtered set of words of ``text`` (SPEC §9)."""
    if not text:
        return frozenset()
    return frozenset(w for w in _WORD_RE.findall(text.lower()) if w not in STOP_WORDS)


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets share nothing, so 0.0."""
    set_a = a if isinstance(a, set | frozenset) else set(a)
    set_b = b if isinstance(b, set | frozenset) else set(b)
    shared = len(set_a & set_b)
    union = len(set_a) + len(set_b) - shared  # |a ∪ b|, without building it
    if not union:
        return 0.0
    return shared / union


def normalise_tags(tags: Iterable[str] | None) -> frozenset[str]:
    """Tags as compared: case- and whitespace-insensitive ("Billing" and "billing " are the same
    domain to an operator); blank tags are no tags."""
    return frozenset(t.strip().lower() for t in (tags or ()) if t and t.strip())


@dataclass(frozen=True, slots=True)
class Context:
    """A streak session's side of the check, normalised once: a caller that judges one session
    against many objects (the sweep) builds it once. ``text`` is None when blank."""

    tags: frozenset[str]
    text: str | None
    _words: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, context_tags: Iterable[str] | None, context_text: str | None) -> Context:
        text = context_text if context_text and context_text.strip() else None
        return cls(normalise_tags(context_tags), text)

    @property
    def words(self) -> frozenset[str]:
        """The text's word set, computed on first use (only a text whose tags missed needs it)."""
        words = self._words
        if words is None:
            words = word_set(self.text)
            object.__setattr__(self, "_words", words)  # a cache: the value never changes
        return words


#: A session with neither tags nor text (or one whose row is missing): "unknown".
NO_CONTEXT = Context(frozenset(), None)


@dataclass(frozen=True, slots=True)
class Subject:
    """An object's side of the check; its word set is computed only if a text asks for it."""

    tags: frozenset[str]
    content: str | None
    _words: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, domain_tags: Iterable[str] | None, content: str | None) -> Subject:
        return cls(normalise_tags(domain_tags), content)

    @property
    def words(self) -> frozenset[str]:
        words = self._words
        if words is None:
            words = word_set(self.content)
            object.__setattr__(self, "_words", words)  # a cache: the value never changes
        return words


def classify(
    context: Context, subject: Subject, threshold: float = DEFAULT_JACCARD_THRESHOLD
) -> str:
    """Was this streak session about the object's domain? (SPEC §9)

    "relevant" if the session's tags share one with the object's ``domain_tags``, or the Jaccard
    index of the word sets of ``context_text`` and ``content`` is ≥ ``threshold``; "unknown" if the
    session has neither tags nor (non-blank) text; otherwise "irrelevant".
    """
    tags, text = context.tags, context.text
    if not tags and text is None:
        return UNKNOWN
    if tags & subject.tags:
        return RELEVANT
    if text is not None and jaccard(context.words, subject.words) >= threshold:
        return RELEVANT
    return IRRELEVANT


def classify_session(
    context_tags: Iterable[str] | None,
    context_text: str | None,
    domain_tags: Iterable[str] | None,
    content: str | None,
    threshold: float = DEFAULT_JACCARD_THRESHOLD,
) -> str:
    """:func:`classify` on plain values."""
    return classify(
        Context.of(context_tags, context_text), Subject.of(domain_tags, content), threshold
    )


@dataclass(frozen=True)
class SweepDecision:
    """The outcome of one IGNORED_CHECK (SPEC §9); ``reasons`` are operator-readable sentences."""

    apply_penalty: bool
    reasons: list[str]
    domain_check: str
    relevant: int = 0
    irrelevant: int = 0
    unknown: int = 0
    #: Which exemptions applied: any of "PERMANENT", "pinned", "DEPRECATED".
    exemptions: list[str] = field(default_factory=list)

    def as_payload(self) -> dict:
        """The IGNORED_CHECK payload fields this decision contributes."""
        return {
            "apply_penalty": self.apply_penalty,
            "reasons": list(self.reasons),
            "domain_check": self.domain_check,
            "relevant_sessions": self.relevant,
            "irrelevant_sessions": self.irrelevant,
            "unknown_sessions": self.unknown,
            "exemptions": list(self.exemptions),
        }


def sweep_decision(
    *,
    decay_profile: str,
    pinned: bool,
    epistemic_type: str,
    unused_streak: int,
    classifications: Sequence[str],
    threshold: int = DEFAULT_STREAK_THRESHOLD,
) -> SweepDecision:
    """Decide whether an object gets the IGNORED_REPEATEDLY penalty (SPEC §9).

    ``classifications`` holds one :func:`classify_session` result per session of the current
    streak, so its length must equal ``unused_streak`` once the streak reaches ``threshold``
    (below the threshold, or for an exempt object, it is not read and may be empty).

    Order: exemptions (PERMANENT, pinned, DEPRECATED — all that apply are reported), then the
    streak threshold, then the domain check. When the check is not run the counts are 0.
    """
    if threshold < 1:
        raise ValueError("The streak threshold N must be at least 1.")
    if unused_streak < 0:
        raise ValueError("unused_streak cannot be negative.")

    exemptions: list[str] = []
    reasons: list[str] = []
    if decay_profile == "PERMANENT":
        exemptions.append("PERMANENT")
        reasons.append("Exempt: the decay profile is PERMANENT.")
    if pinned:
        exemptions.append("pinned")
        reasons.append("Exempt: the object is pinned (operator-affirmed).")
    if epistemic_type == "DEPRECATED":
        exemptions.append("DEPRECATED")
        reasons.append("Exempt: the object is DEPRECATED.")
    if exemptions:
        return SweepDecision(
            apply_penalty=False,
            reasons=reasons,
            domain_check=DOMAIN_CHECK_NOT_RUN,
            exemptions=exemptions,
        )

    if unused_streak < threshold:
        return SweepDecision(
            apply_penalty=False,
            reasons=[
                f"Unused streak of {unused_streak} session(s) is below the threshold of "
                f"{threshold}."
            ],
            domain_check=DOMAIN_CHECK_NOT_RUN,
        )

    if len(classifications) != unused_streak:
        raise ValueError(
            f"Expected one classification per streak session ({unused_streak}), "
            f"got {len(classifications)}."
        )
    unknown_values = [c for c in classifications if c not in CLASSIFICATIONS]
    if unknown_values:
        raise ValueError(f"Unknown session classification(s): {sorted(set(unknown_values))}.")

    relevant = sum(1 for c in classifications if c == RELEVANT)
    irrelevant = sum(1 for c in classifications if c == IRRELEVANT)
    unknown = sum(1 for c in classifications if c == UNKNOWN)
    counts = {"relevant": relevant, "irrelevant": irrelevant, "unknown": unknown}
    streak = (
        f"Unused in {unused_streak} consecutive session(s) (threshold {threshold}): "
        f"{relevant} relevant, {irrelevant} irrelevant, {unknown} unknown."
    )

    if unknown == unused_streak:
        # RFC-0009 §7: the check is best-effort; without any context to judge by it is skipped,
        # logged as skipped, and the penalty applies uniformly.
        return SweepDecision(
            apply_penalty=True,
            reasons=[
                streak,
                "Domain check skipped: no streak session had context tags or context text, "
                "so the penalty applies.",
            ],
            domain_check=DOMAIN_CHECK_SKIPPED,
            **counts,
        )
    if relevant + unknown >= threshold:
        return SweepDecision(
            apply_penalty=True,
            reasons=[
                streak,
                f"Domain check passed: {relevant + unknown} relevant or unknown session(s) "
                f"≥ {threshold}, so the object was ignored where it should have helped.",
            ],
            domain_check=DOMAIN_CHECK_PASSED,
            **counts,
        )
    return SweepDecision(
        apply_penalty=False,
        reasons=[
            streak,
            f"Domain check failed: only {relevant + unknown} relevant or unknown session(s) "
            f"< {threshold}; the conversations were mostly about other topics, which says "
            "nothing about this object.",
        ],
        domain_check=DOMAIN_CHECK_FAILED,
        **counts,
    )
