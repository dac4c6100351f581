"""Response analyser (analysis/lexical.py): verdicts, API shape, the reference set and its
targets (precision of REFERENCED >= 0.75 with recall >= 0.5), purity (no Django import)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from analysis.api import (
    DEFAULT_SCORER,
    REFERENCED,
    UNUSED,
    Detection,
    DetectionInput,
    analyse,
)
from analysis.evaluation import REFERENCE_SET
from analysis.lexical import LexicalScorer
from tests.factories import run_without_django

ROOT = Path(__file__).resolve().parents[2]
REFERENCED_KINDS = {"verbatim", "paraphrase", "number", "partial", "applied", "negation_consistent"}
UNUSED_KINDS = {"hard_negative", "number_mismatch", "unrelated", "negated"}


def verdict(memory: str, response: str) -> Detection:
    (det,) = analyse(response, [DetectionInput("m", memory)])
    return det


@pytest.fixture(scope="module")
def reference_rows() -> list[dict]:
    with REFERENCE_SET.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# -- verdicts --------------------------------------------------------------------------------


def test_verbatim_use_is_referenced():
    det = verdict(
        "The project uses Python 3.11 and Django 5.2.",
        "Since the project is on Python 3.11 and Django 5.2, you can use match statements.",
    )
    assert det.signal_type == REFERENCED
    assert det.score >= 0.8


def test_paraphrase_sharing_inflected_terms_is_referenced():
    det = verdict(
        "User prefers tabs over spaces for indentation.",
        "I've re-indented the snippet with tab characters instead of spaces, as you like it.",
    )
    assert det.signal_type == REFERENCED


def test_exact_identifier_is_referenced_on_its_own():
    det = verdict(
        "The hotel booking in Kyoto has confirmation number KX-48213.",
        "If the front desk can't find it, give them KX-48213.",
    )
    assert det.signal_type == REFERENCED
    assert "exact identifier" in det.reason


def test_unrelated_response_is_unused():
    det = verdict(
        "User's blood type is O negative.",
        "For a 10k, start tapering about a week before the race.",
    )
    assert det.signal_type == UNUSED
    assert det.score == 0.0


def test_hard_negative_sharing_one_name_is_unused():
    det = verdict(
        "The user's cat is called Python.",
        "Python's list comprehensions are usually faster than a for loop with append.",
    )
    assert det.signal_type == UNUSED
    assert "single shared term" in det.reason


def test_different_number_in_the_same_words_is_unused():
    det = verdict(
        "The staging database listens on port 5433.",
        "PostgreSQL listens on port 5432 by default; change `port` in postgresql.conf.",
    )
    assert det.signal_type == UNUSED


def test_negated_response_is_not_a_reference():
    det = verdict("Alice prefers Python.", "Alice does not use Python anymore.")
    assert det.signal_type == UNUSED
    assert "contradicts" in det.reason


def test_contraction_negation_is_not_a_reference():
    det = verdict(
        "The frontend is deployed on Vercel.",
        "The frontend isn't deployed on Vercel; it's served from S3 behind CloudFront.",
    )
    assert det.signal_type == UNUSED


def test_negation_in_memory_and_response_is_a_reference():
    det = verdict("User doesn't eat pork.", "Since you don't eat pork, I used turkey bacon.")
    assert det.signal_type == REFERENCED


def test_words_scattered_over_a_long_response_do_not_add_up():
    memory = "User is allergic to peanuts."
    response = (
        "Peanut butter is a cheap protein source. The weather in Lisbon is mild in March. "
        "Trains to Porto leave every hour. Your phone's battery lasts longer in low-power mode. "
        "Some people are allergic to cats, and antihistamines help with that."
    )
    assert verdict(memory, response).signal_type == UNUSED
    assert verdict(memory, "Since you're allergic to peanuts, skip the satay.").signal_type == (
        REFERENCED
    )


def test_empty_memory_or_response_is_unused():
    assert verdict("", "Anything at all.").signal_type == UNUSED
    assert verdict("User is vegetarian.", "").signal_type == UNUSED
    assert verdict("User likes it.", "The user likes it.").score == 0.0  # only common words


def test_analysis_is_deterministic():
    objects = [DetectionInput(str(i), m) for i, m in enumerate(["User is vegetarian.", "a b"])]
    response = "Since you're vegetarian, here's a lentil curry."
    assert analyse(response, objects) == analyse(response, objects)


# -- API shape -------------------------------------------------------------------------------


def test_one_result_per_object_in_order():
    objects = [
        DetectionInput("b", "User's blood type is O negative."),
        DetectionInput("a", "User is vegetarian."),
        DetectionInput("c", "User is vegetarian."),
    ]
    results = analyse("Since you're vegetarian, here's a lentil curry.", objects)
    assert [d.object_id for d in results] == ["b", "a", "c"]
    assert [d.signal_type for d in results] == [UNUSED, REFERENCED, REFERENCED]
    assert all(isinstance(d, Detection) and d.reason for d in results)


def test_empty_object_list_gives_empty_result():
    assert analyse("Any response.", []) == []


def test_scores_are_within_unit_interval(reference_rows):
    for row in reference_rows:
        det = verdict(row["memory"], row["response"])
        assert 0.0 <= det.score <= 1.0, row["id"]


def test_threshold_override():
    objects = [DetectionInput("x", "The CI pipeline timeout is 45 minutes.")]
    response = "The suite takes 50 minutes, over the 45-minute pipeline limit."
    (default,) = analyse(response, objects)
    (strict,) = analyse(response, objects, threshold=0.99)
    (lenient,) = analyse(response, objects, threshold=0.0)
    assert strict.score == default.score == lenient.score
    assert strict.signal_type == UNUSED
    assert lenient.signal_type == REFERENCED


# -- pluggable scorer ------------------------------------------------------------------------


@dataclass
class FixedScorer:
    """A scorer that is not lexical at all: fixed scores by memory text."""

    scores: dict[str, float]
    threshold: float = 0.5
    calls: list[tuple[str, str]] = field(default_factory=list)

    def score(self, content: str, response: str) -> tuple[float, str]:
        self.calls.append((content, response))
        return self.scores[content], "fixed"


@dataclass
class CountingBatchScorer:
    threshold: float = 0.5
    batches: int = 0

    def score(self, content: str, response: str) -> tuple[float, str]:
        raise AssertionError("a batch scorer is called through score_many")

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]:
        self.batches += 1
        return [(0.9, "batch") for _ in contents]


def test_a_custom_scorer_is_used():
    scorer = FixedScorer({"alpha": 0.7, "beta": 0.2, "gamma": 1.7})
    objects = [DetectionInput(k, k) for k in ("alpha", "beta", "gamma")]
    results = analyse("the response", objects, scorer=scorer)
    assert scorer.calls == [
        ("alpha", "the response"),
        ("beta", "the response"),
        ("gamma", "the response"),
    ]
    assert [d.signal_type for d in results] == [REFERENCED, UNUSED, REFERENCED]
    assert [d.score for d in results] == [0.7, 0.2, 1.0]  # clamped to [0, 1]
    assert {d.reason for d in results} == {"fixed"}


def test_a_batch_scorer_sees_the_response_once():
    scorer = CountingBatchScorer()
    objects = [DetectionInput(str(i), f"memory {i}") for i in range(20)]
    results = analyse("the response", objects, scorer=scorer)
    assert scorer.batches == 1
    assert len(results) == 20
    assert all(d.signal_type == REFERENCED for d in results)


def test_lexical_scorer_threshold_is_configurable():
    lenient = LexicalScorer(threshold=0.1)
    objects = [DetectionInput("x", "User prefers aisle seats on long-haul flights.")]
    response = "Long-haul flights on the A350 have quieter cabins."
    (det,) = analyse(response, objects, scorer=lenient)
    assert det.signal_type == REFERENCED
    assert DEFAULT_SCORER.threshold == 0.4


# -- the reference set -----------------------------------------------------------------------


def test_reference_set_is_large_balanced_and_valid(reference_rows):
    assert len(reference_rows) >= 200
    ids = [r["id"] for r in reference_rows]
    assert len(ids) == len(set(ids))
    for row in reference_rows:
        assert set(row) == {"id", "memory", "response", "label", "kind"}, row
        assert row["memory"].strip() and row["response"].strip(), row["id"]
        assert row["label"] in (REFERENCED, UNUSED), row["id"]
        kinds = REFERENCED_KINDS if row["label"] == REFERENCED else UNUSED_KINDS
        assert row["kind"] in kinds, row["id"]
    referenced = sum(r["label"] == REFERENCED for r in reference_rows)
    assert 0.4 <= referenced / len(reference_rows) <= 0.6
    kinds_present = {r["kind"] for r in reference_rows}
    assert {"paraphrase", "hard_negative", "negated"} <= kinds_present
    assert sum(r["kind"] == "hard_negative" for r in reference_rows) >= 30
    assert sum(r["kind"] == "paraphrase" for r in reference_rows) >= 30


def test_reference_set_meets_precision_and_recall_targets(reference_rows):
    tp = fp = fn = 0
    for row in reference_rows:
        predicted = verdict(row["memory"], row["response"]).signal_type == REFERENCED
        actual = row["label"] == REFERENCED
        tp += predicted and actual
        fp += predicted and not actual
        fn += actual and not predicted
    precision = tp / (tp + fp)
    recall = tp / (tp + fn)
    assert precision >= 0.75, (precision, recall)
    assert recall >= 0.5, (precision, recall)


# -- purity ----------------------------------------------------------------------------------


def test_module_imports_without_django():
    code = (
        "import sys\n"
        "import analysis.api as d\n"
        "d.analyse('x', [d.DetectionInput('1', 'x y')])\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not bad, bad\n"
    )
    run_without_django(code)


# -- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unit", ["9", "9.", "9 hours ", "9 TB 9 GB ", "$9", "9%", "'9", "9:", "half a "]
)
def test_a_long_run_of_one_pattern_is_analysed_in_linear_time(unit):
    """A response is up to 200,000 characters (API.md). Each normalisation pattern anchors its
    number with a look-behind, so a run of digits is scanned once: a pattern that tried every
    position inside the run took 15 s for 20,000 digits (quadratic) and minutes for 60,000; the
    whole analysis of 60,000 characters of any run here takes well under a second."""
    text = unit * (60_000 // len(unit))
    memory = "User's disk is 5 TB and the nightly run takes 1 hour 20 minutes."
    started = time.perf_counter()
    (det,) = analyse(text, [DetectionInput("m", memory)])
    assert time.perf_counter() - started < 10  # linear: ~0.4 s here; quadratic: minutes
    assert det.signal_type in (REFERENCED, UNUSED)
