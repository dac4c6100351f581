"""The fitted response-analysis scorer (analysis/model.py): the lexical features it
reads, its vetoes, its verdicts, and that bench/fit_detection.py reproduces its coefficients,
thresholds and cross-validated figures from the tuning sets (reference, tuning2, tuning3)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from analysis.api import (
    REFERENCED,
    UNUSED,
    BatchScorer,
    DetectionInput,
    Scorer,
    analyse,
)
from analysis.evaluation import DATA, REFERENCE_SET, load_rows
from analysis.lexical import LexicalScorer
from analysis.model import (
    COEFFICIENTS,
    FEATURES,
    INTERCEPT,
    MATCHED_RECALL_THRESHOLD,
    THRESHOLD,
    VETO_CAP,
    FittedScorer,
    feature_vector,
)
from tests.factories import run_without_django

ROOT = Path(__file__).resolve().parents[2]
FITTED = FittedScorer()


def verdict(memory: str, response: str):
    (det,) = analyse(response, [DetectionInput("m", memory)], FITTED)
    return det


def test_features_agree_with_the_lexical_score_and_reason():
    """features_many is the same computation as score_many (the refactor changed no score)."""
    lexical = LexicalScorer()
    for row in load_rows(REFERENCE_SET)[:120]:
        (f,) = lexical.features_many([row["memory"]], row["response"])
        assert (f.score, f.reason) == lexical.score(row["memory"], row["response"]), row["id"]
        assert len(feature_vector(f)) == len(FEATURES) == len(COEFFICIENTS)


def test_features_report_the_checks_that_fired():
    lexical = LexicalScorer()
    (neg,) = lexical.features_many(
        ["Alice prefers Python for data work."],
        "Alice does not use Python anymore; she moved to Julia.",
    )
    assert neg.contradiction and neg.retraction and not neg.conflict
    (flip,) = lexical.features_many(
        ["User does not have a car."], "Now that you have a car, the roof rack makes sense."
    )
    assert flip.memory_negated and flip.negation_dropped and not flip.contradiction
    (cue,) = lexical.features_many(
        ["User used to work at Spotify."], "Since you work at Spotify now, ask about mobility."
    )
    assert cue.cue_dropped
    (imp,) = lexical.features_many(
        ["User's preferred airline is KLM."], "KLM's hub is Amsterdam Schiphol."
    )
    assert imp.impersonal and imp.unaddressed
    (num,) = lexical.features_many(
        ["User's layover in Doha is 2 hours 45 minutes."],
        "With 4 hours 45 minutes in Doha, you could take a city tour.",
    )
    assert num.other_number and not num.different_numbers  # 45 matches, 2 does not


def test_fitted_scorer_is_a_batch_scorer_with_its_fitted_threshold():
    assert isinstance(FITTED, Scorer) and isinstance(FITTED, BatchScorer)
    assert FITTED.threshold == THRESHOLD == 0.68
    assert MATCHED_RECALL_THRESHOLD == 0.70


def test_a_use_is_referenced():
    det = verdict(
        "User is allergic to penicillin.",
        "Because you're allergic to penicillin, ask for a macrolide instead.",
    )
    assert det.signal_type == REFERENCED
    assert det.score == pytest.approx(0.6835, abs=1e-4)
    assert det.reason.startswith("fitted 0.68 >= 0.68 (lexical 0.94 >= 0.40")


def test_a_negative_memory_used_negatively_is_referenced():
    det = verdict(
        "User doesn't eat pork.", "Since you don't eat pork, I swapped the bacon for mushrooms."
    )
    assert det.signal_type == REFERENCED and det.score == pytest.approx(0.9118, abs=1e-4)


def test_a_contradiction_is_unused_and_says_so():
    det = verdict(
        "Alice prefers Python for data work.",
        "Alice does not use Python anymore; she moved to Julia.",
    )
    assert det.signal_type == UNUSED
    assert det.score == VETO_CAP
    assert "contradicts the memory" in det.reason


def test_a_topic_overlap_the_lexical_scorer_takes_for_a_use_is_unused():
    memory = "User prefers aisle seats on long-haul flights."
    response = "Long-haul flights on the A350 have a quieter cabin than older jets."
    assert LexicalScorer().score(memory, response)[0] >= 0.4  # the lexical false positive
    det = verdict(memory, response)
    assert det.signal_type == UNUSED and det.score == pytest.approx(0.1698, abs=1e-4)


def test_nothing_in_common_scores_zero():
    det = verdict("User's daughter has ballet on Wednesdays.", "I booked the dentist for Friday.")
    assert det.signal_type == UNUSED and det.score == 0.0
    assert det.reason == "fitted 0.00 < 0.68 (no shared content terms)"


def test_fitted_scorer_is_deterministic_and_batches_like_single_calls():
    response = "Because you're allergic to penicillin, ask for a macrolide. Pork is out too."
    contents = ["User is allergic to penicillin.", "User doesn't eat pork.", "User likes jazz."]
    batch = FITTED.score_many(contents, response)
    assert batch == [FITTED.score(c, response) for c in contents]
    assert batch == FittedScorer().score_many(contents, response)


def test_the_fit_script_reproduces_the_model_and_its_cross_validated_figures():
    """bench/fit_detection.py refits the module's coefficients and both thresholds exactly, and
    its out-of-fold figures on the tuning data are the ones in docs/DETECTION.md."""
    sys.path.insert(0, str(ROOT))
    try:
        import bench.fit_detection as fit_script
    finally:
        sys.path.remove(str(ROOT))
    rows = [r for name in fit_script.SETS for r in load_rows(DATA / name)]
    assert len(rows) == 2265
    ys = [int(r["label"] == REFERENCED) for r in rows]
    xs, vetoes = fit_script.featurise(rows, None)
    intercept, coef = fit_script.fit(xs, ys, 1.0, vetoes)
    assert intercept == pytest.approx(INTERCEPT, abs=1e-5)
    assert coef == pytest.approx(list(COEFFICIENTS), abs=1e-5)
    probs = fit_script.oof(xs, ys, vetoes, fit_script.folds(rows, 5, 18), 5, 1.0)
    assert fit_script.choose_threshold(ys, probs, 0.85) == THRESHOLD
    default = LexicalScorer()
    lexical = [default.score(r["memory"], r["response"])[0] >= 0.4 for r in rows]
    assert fit_script.matched_recall_threshold(ys, probs, lexical) == MATCHED_RECALL_THRESHOLD
    assert fit_script.confusion(ys, probs, THRESHOLD) == (670, 118, 432, 1045)
    assert fit_script.confusion(ys, probs, MATCHED_RECALL_THRESHOLD) == (650, 103, 452, 1060)


def test_model_module_imports_without_django():
    code = (
        "import sys\n"
        "import analysis.model as m\n"
        "m.FittedScorer().score('x y', 'x y')\n"
        "bad = sorted(k for k in sys.modules if k == 'django' or k.startswith('django.'))\n"
        "assert not bad, bad\n"
        "assert 'numpy' not in sys.modules\n"
    )
    run_without_django(code)


def test_a_short_memory_restated_in_full_is_referenced():
    """The model alone under-rates a short memory restated word for word without "you" (0.57
    here); a restatement is a use, so the score is raised to the threshold. Checks against it
    still win: a "no longer" keeps the veto, another subject is no restatement."""
    from analysis.model import THRESHOLD, FittedScorer

    scorer = FittedScorer()
    score, reason = scorer.score("Alice prefers Python", "Alice prefers Python for scripting.")
    assert score == THRESHOLD and "restated in full" in reason
    score, reason = scorer.score("Alice prefers Python", "Alice no longer prefers Python.")
    assert score <= 0.05 and "contradicts" in reason
    score, _ = scorer.score("Alice prefers Python", "Bob prefers Python.")
    assert score < THRESHOLD
