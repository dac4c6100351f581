"""SPEC §9 domain relevance check and the IGNORED_REPEATEDLY sweep decision."""

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedback.relevance import (
    NO_CONTEXT,
    STOP_WORDS,
    Context,
    Subject,
    SweepDecision,
    classify,
    classify_session,
    jaccard,
    sweep_decision,
    word_set,
)

ROOT = Path(__file__).resolve().parents[2]


# --- word_set / jaccard ---------------------------------------------------------------------------


def test_word_set_lowercases_splits_on_non_alphanumerics_and_drops_stop_words():
    assert word_set("The Postgres-16's WAL is FULL") == {"postgres", "16", "wal", "full"}
    assert word_set("snake_case and don't") == {"snake", "case"}


def test_word_set_of_nothing_is_empty():
    assert word_set(None) == frozenset()
    assert word_set("") == frozenset()
    assert word_set("the and of it") == frozenset()


def test_stop_words_cover_function_words_and_contraction_fragments():
    assert {"the", "a", "is", "and", "of", "to", "you", "don", "t", "ll"} <= STOP_WORDS
    assert "postgres" not in STOP_WORDS


def test_jaccard():
    assert jaccard({"a", "b"}, {"b", "c"}) == 1 / 3
    assert jaccard({"a"}, {"a"}) == 1.0
    assert jaccard({"a"}, {"b"}) == 0.0
    assert jaccard(set(), set()) == 0.0
    assert jaccard(set(), {"a"}) == 0.0


@given(
    st.lists(st.sampled_from("abcdefgh"), max_size=8),
    st.lists(st.sampled_from("abcdefgh"), max_size=8),
)
def test_jaccard_is_intersection_over_union_for_any_iterables(a, b):
    union = set(a) | set(b)
    expected = len(set(a) & set(b)) / len(union) if union else 0.0
    assert jaccard(a, b) == expected
    assert jaccard(frozenset(a), set(b)) == expected


# --- classify_session -----------------------------------------------------------------------------


def test_shared_tag_makes_a_session_relevant():
    assert classify_session(["billing", "eu"], None, ["billing"], "") == "relevant"


def test_tags_compare_case_and_whitespace_insensitively():
    assert classify_session(["Billing "], None, ["billing"], "") == "relevant"


def test_tags_without_a_match_and_no_text_are_irrelevant():
    assert classify_session(["deploys"], None, ["billing"], "invoices") == "irrelevant"


def test_lexically_similar_text_makes_a_session_relevant():
    content = "Invoices for EU customers are issued on the first business day."
    text = "When are the invoices for our EU customers issued?"
    # {invoices, eu, customers, issued} / {invoices, eu, customers, issued, first, business, day}
    assert jaccard(word_set(text), word_set(content)) == 4 / 7
    assert classify_session(None, text, ["billing"], content) == "relevant"


def test_jaccard_exactly_at_the_threshold_is_relevant():
    # 1 shared word of 5 in the union: exactly 0.2.
    assert classify_session([], "alpha beta gamma delta epsilon", [], "alpha") == "relevant"
    # 1 of 6: 0.1667 < 0.2.
    assert classify_session([], "alpha beta gamma delta epsilon", [], "alpha zeta") == (
        "irrelevant"
    )


def test_threshold_is_a_parameter():
    text, content = "alpha beta gamma delta epsilon", "alpha zeta"
    assert classify_session([], text, [], content, threshold=0.1) == "relevant"
    assert classify_session([], "alpha", [], "alpha", threshold=1.0) == "relevant"


def test_text_without_a_match_is_irrelevant():
    assert classify_session(None, "deploy the frontend", ["billing"], "invoices") == "irrelevant"


def test_tags_miss_but_text_matches_is_relevant():
    assert classify_session(["ops"], "invoice totals", ["billing"], "Invoice totals") == (
        "relevant"
    )


@pytest.mark.parametrize(
    ("tags", "text"),
    [(None, None), ([], ""), ([""], "   "), (["  "], None)],
)
def test_neither_tags_nor_text_is_unknown(tags, text):
    assert classify_session(tags, text, ["billing"], "invoices") == "unknown"


_WORDS = ["Refunds", "annual", "plan", "the", "is", "not", "rain", "Lisbon", "prorated", "ok"]
_text = st.one_of(
    st.none(),
    st.lists(st.sampled_from([*_WORDS, " ", "", "-", "'s", "\n"]), max_size=8).map(" ".join),
)
_tags = st.one_of(
    st.none(), st.lists(st.sampled_from(["billing", "Billing ", " ", "", "weather", "x"]))
)


@settings(max_examples=400, deadline=None)
@given(
    context_tags=_tags,
    context_text=_text,
    subjects=st.lists(st.tuples(_tags, _text), min_size=1, max_size=4),
    threshold=st.sampled_from([0.0, 0.1, 0.2, 1 / 3, 0.5, 1.0]),
)
def test_a_context_kept_across_objects_answers_as_fresh_values(
    context_tags, context_text, subjects, threshold
):
    """The sweep builds one Context per session and judges many objects with it: its cached word
    set must never change an answer."""
    context = Context.of(context_tags, context_text)
    for domain_tags, content in subjects:
        subject = Subject.of(domain_tags, content)
        expected = classify_session(context_tags, context_text, domain_tags, content, threshold)
        assert classify(context, subject, threshold) == expected
        assert classify(context, subject, threshold) == expected  # with the words cached


def test_no_context_is_unknown():
    assert classify(NO_CONTEXT, Subject.of(["billing"], "invoices")) == "unknown"
    assert Context.of([" ", ""], "  \n") == NO_CONTEXT


# --- sweep_decision -------------------------------------------------------------------------------


def decide(**overrides) -> SweepDecision:
    facts = {
        "decay_profile": "MEDIUM",
        "pinned": False,
        "epistemic_type": "ASSERTED",
        "unused_streak": 5,
        "classifications": ["relevant"] * 5,
        "threshold": 5,
    }
    facts.update(overrides)
    return sweep_decision(**facts)


@pytest.mark.parametrize(
    ("overrides", "exemption"),
    [
        ({"decay_profile": "PERMANENT"}, "PERMANENT"),
        ({"pinned": True}, "pinned"),
        ({"epistemic_type": "DEPRECATED"}, "DEPRECATED"),
    ],
)
def test_exempt_objects_are_never_penalized(overrides, exemption):
    decision = decide(**overrides)
    assert decision.apply_penalty is False
    assert decision.domain_check == "not_run"
    assert decision.exemptions == [exemption]
    assert len(decision.reasons) == 1
    assert exemption in decision.reasons[0]
    assert (decision.relevant, decision.irrelevant, decision.unknown) == (0, 0, 0)


def test_every_applicable_exemption_is_reported():
    decision = decide(decay_profile="PERMANENT", pinned=True, epistemic_type="DEPRECATED")
    assert decision.exemptions == ["PERMANENT", "pinned", "DEPRECATED"]
    assert len(decision.reasons) == 3


def test_below_threshold_no_penalty_and_classifications_not_read():
    decision = decide(unused_streak=4, classifications=[])
    assert decision.apply_penalty is False
    assert decision.domain_check == "not_run"
    assert "below the threshold of 5" in decision.reasons[0]


def test_all_unknown_skips_the_check_and_applies_the_penalty():
    decision = decide(classifications=["unknown"] * 5)
    assert decision.apply_penalty is True
    assert decision.domain_check == "skipped"
    assert (decision.relevant, decision.irrelevant, decision.unknown) == (0, 0, 5)
    assert any("skipped" in reason for reason in decision.reasons)


def test_relevant_plus_unknown_reaching_n_passes_and_applies_the_penalty():
    decision = decide(
        unused_streak=7,
        classifications=["relevant", "unknown", "irrelevant", "relevant", "irrelevant"]
        + ["unknown", "relevant"],
    )
    assert decision.apply_penalty is True
    assert decision.domain_check == "passed"
    assert (decision.relevant, decision.irrelevant, decision.unknown) == (3, 2, 2)


def test_mostly_irrelevant_sessions_fail_the_check_and_spare_the_object():
    decision = decide(
        unused_streak=6,
        classifications=["relevant", "irrelevant", "irrelevant", "unknown", "relevant", "unknown"],
    )
    assert decision.apply_penalty is False
    assert decision.domain_check == "failed"
    assert (decision.relevant, decision.irrelevant, decision.unknown) == (2, 2, 2)
    assert any("other topics" in reason for reason in decision.reasons)


def test_threshold_n_is_a_parameter():
    assert decide(unused_streak=3, classifications=["relevant"] * 3, threshold=3).apply_penalty
    assert not decide(unused_streak=3, classifications=["relevant"] * 3).apply_penalty


def test_classifications_must_cover_the_streak():
    with pytest.raises(ValueError, match="one classification per streak session"):
        decide(unused_streak=6)


def test_unknown_classification_values_are_rejected():
    with pytest.raises(ValueError, match="Unknown session classification"):
        decide(classifications=["relevant"] * 4 + ["maybe"])


def test_invalid_threshold_or_streak_is_rejected():
    with pytest.raises(ValueError):
        decide(threshold=0)
    with pytest.raises(ValueError):
        decide(unused_streak=-1)


def test_payload_carries_the_decision_for_the_ignored_check_operation():
    payload = decide(classifications=["unknown"] * 5).as_payload()
    assert payload["apply_penalty"] is True
    assert payload["domain_check"] == "skipped"
    assert payload["unknown_sessions"] == 5
    assert payload["exemptions"] == []
    assert payload["reasons"]


def test_module_imports_without_django():
    code = "import sys, feedback.relevance; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
