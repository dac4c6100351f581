"""The held-out detection set (issue #18): frozen, valid, and measured against its targets.

feedback/data/detection_heldout.jsonl and docs/DETECTION_LABELLING_GUIDE.md were written by a
labeller who never saw feedback/detection.py. They are never edited: the sha256 pins below fail
on any change, including a relabelling.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "feedback" / "data" / "detection_heldout.jsonl"
GUIDE = ROOT / "docs" / "DETECTION_LABELLING_GUIDE.md"
HELDOUT_SHA256 = "ce2b672e2f748867b36dfbed35bf0724922ae923dc3314e57355df2324fabf2a"
GUIDE_SHA256 = "166e14b4319d37037293a884a5329b4b102f7e014e46546561a3490aff7cdb37"
KINDS = {
    "verbatim",
    "paraphrase",
    "synonym",
    "hard_negative",
    "entity_mismatch",
    "number_mismatch",
    "number_match",
    "negation",
    "contradiction",
    "partial",
    "list",
    "code_config",
    "long_multi",
    "quoted_question",
    "unrelated",
}


@pytest.fixture(scope="module")
def heldout_rows() -> list[dict]:
    with HELDOUT.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_heldout_set_and_guide_are_frozen():
    assert hashlib.sha256(HELDOUT.read_bytes()).hexdigest() == HELDOUT_SHA256
    assert hashlib.sha256(GUIDE.read_bytes()).hexdigest() == GUIDE_SHA256


def test_heldout_set_is_valid_and_covers_every_kind(heldout_rows):
    assert len(heldout_rows) == 365
    assert len({r["id"] for r in heldout_rows}) == 365
    for row in heldout_rows:
        assert set(row) == {"id", "memory", "response", "label", "kind"}, row["id"]
        assert row["label"] in ("REFERENCED", "UNUSED"), row["id"]
        assert row["kind"] in KINDS, row["id"]
    per_kind = Counter(r["kind"] for r in heldout_rows)
    assert set(per_kind) == KINDS
    assert min(per_kind.values()) >= 20
    labels = Counter(r["label"] for r in heldout_rows)
    assert labels == {"REFERENCED": 177, "UNUSED": 188}


def test_heldout_figures_do_not_regress(heldout_rows):
    """The published held-out figures (docs/DETECTION.md): precision 0.752, recall 0.650 at 0.40.
    This is a regression floor, NOT the issue's targets (0.85 / 0.70), which are not met."""
    from feedback.detection import DEFAULT_SCORER
    from feedback.detection_eval import evaluate, score_rows

    ev = evaluate(heldout_rows, score_rows(heldout_rows), DEFAULT_SCORER.threshold)
    assert (ev.tp, ev.fp, ev.fn, ev.tn) == (115, 38, 62, 150)
    lo, hi = ev.precision_interval
    assert round(ev.precision, 3) == 0.752 and round(lo, 3) == 0.678 and round(hi, 3) == 0.813


def test_fitted_scorer_heldout_figures_are_the_published_evaluation(heldout_rows):
    """Issue #18 round 3, held-out evaluation 1 of the fitted scorer (docs/DETECTION.md), at its
    two thresholds fitted on the tuning sets only. A pin of that evaluation, not a target: no
    value was chosen from these figures, and the lexical scorer stays the default."""
    from feedback.detection_eval import evaluate, score_rows
    from feedback.detection_model import MATCHED_RECALL_THRESHOLD, THRESHOLD, FittedScorer

    scores = score_rows(heldout_rows, FittedScorer())
    at_a = evaluate(heldout_rows, scores, THRESHOLD)
    assert (at_a.tp, at_a.fp, at_a.fn, at_a.tn) == (89, 20, 88, 168)
    assert round(at_a.precision, 3) == 0.817 and round(at_a.recall, 3) == 0.503
    at_b = evaluate(heldout_rows, scores, MATCHED_RECALL_THRESHOLD)
    assert (at_b.tp, at_b.fp, at_b.fn, at_b.tn) == (108, 26, 69, 162)
    assert round(at_b.precision, 3) == 0.806 and round(at_b.recall, 3) == 0.610


# --- the second held-out set (issue #18, round 4) ----------------------------------------------

HELDOUT2 = ROOT / "feedback" / "data" / "detection_heldout2.jsonl"
HELDOUT2_SHA256 = "816719e1bbffe82104c3f536e200e2fe41bb655aa2559bd319a3297a587ffea2"
TUNING3 = ROOT / "feedback" / "data" / "detection_tuning3.jsonl"
TUNING3_SHA256 = "5fb9e0d6c19200a56815556ca147e7051ac5518858ef909017cb392ec027f715"


def _rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_second_heldout_and_third_tuning_sets_are_frozen_and_valid():
    """Both written blind from the labelling guide (without its review notes) by helpers that
    saw neither the code nor any other set; the held-out one is evaluation only."""
    assert hashlib.sha256(HELDOUT2.read_bytes()).hexdigest() == HELDOUT2_SHA256
    assert hashlib.sha256(TUNING3.read_bytes()).hexdigest() == TUNING3_SHA256
    for path, n, referenced in ((HELDOUT2, 320, 158), (TUNING3, 600, 290)):
        rows = _rows(path)
        assert len(rows) == n and len({r["id"] for r in rows}) == n
        for row in rows:
            assert set(row) == {"id", "memory", "response", "label", "kind"}, row["id"]
            assert row["label"] in ("REFERENCED", "UNUSED"), row["id"]
            assert row["kind"] in KINDS, row["id"]
        assert set(Counter(r["kind"] for r in rows)) == KINDS
        assert Counter(r["label"] for r in rows)["REFERENCED"] == referenced
