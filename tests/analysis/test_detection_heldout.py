"""The blind detection sets (docs/DETECTION.md): frozen, valid, and measured against the targets.

analysis/data/detection_heldout*.jsonl and docs/DETECTION_LABELLING_GUIDE.md were written by
labellers who never saw the detector's code. They are never edited: the sha256 pins below fail
on any change, including a relabelling. The first two are tuning data since round 5; the third
is tuning data since round 6; the fourth is the held-out set.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from analysis.evaluation import load_rows

ROOT = Path(__file__).resolve().parents[2]
HELDOUT = ROOT / "analysis" / "data" / "detection_heldout.jsonl"
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
    return load_rows(HELDOUT)


def check_quota_set(path: Path, sha256: str, referenced: int, prefixes=None) -> None:
    """A blind set written to the task sheet's kind quotas: frozen by its sha256, 340 pairs with
    unique ids (from the parts ``prefixes`` when given), the five keys, every kind but
    "unrelated" at least 12 times, and ``referenced`` REFERENCED pairs."""
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    rows = load_rows(path)
    assert len(rows) == 340 and len({r["id"] for r in rows}) == 340
    if prefixes is not None:
        assert {r["id"][:4] for r in rows} == prefixes
    for row in rows:
        assert set(row) == {"id", "memory", "response", "label", "kind"}, row["id"]
        assert row["label"] in ("REFERENCED", "UNUSED"), row["id"]
    per_kind = Counter(r["kind"] for r in rows)
    assert set(per_kind) == KINDS - {"unrelated"} and min(per_kind.values()) >= 12
    assert Counter(r["label"] for r in rows) == {
        "REFERENCED": referenced,
        "UNUSED": 340 - referenced,
    }


def fitted_and_lexical(rows: list[dict]):
    """The fitted scorer at its threshold and the lexical scorer at its own, on ``rows``."""
    from analysis.api import DEFAULT_SCORER
    from analysis.evaluation import evaluate, score_rows
    from analysis.model import THRESHOLD, FittedScorer

    fitted = evaluate(rows, score_rows(rows, FittedScorer()), THRESHOLD)
    lexical = evaluate(rows, score_rows(rows), DEFAULT_SCORER.threshold)
    return fitted, lexical


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


def test_first_set_figures_are_pinned(heldout_rows):
    """Tuning data since round 5 (evaluated in four rounds before): in-sample pins of
    the lexical scorer at 0.40 and the fitted scorer at its threshold, not held-out figures."""
    fitted, lexical = fitted_and_lexical(heldout_rows)
    assert (lexical.tp, lexical.fp, lexical.fn, lexical.tn) == (127, 43, 50, 145)
    assert (fitted.tp, fitted.fp, fitted.fn, fitted.tn) == (130, 22, 47, 166)


# --- the second held-out set (round 4) -----------------------------------------------------------

HELDOUT2 = ROOT / "analysis" / "data" / "detection_heldout2.jsonl"
HELDOUT2_SHA256 = "816719e1bbffe82104c3f536e200e2fe41bb655aa2559bd319a3297a587ffea2"
TUNING3 = ROOT / "analysis" / "data" / "detection_tuning3.jsonl"
TUNING3_SHA256 = "5fb9e0d6c19200a56815556ca147e7051ac5518858ef909017cb392ec027f715"


def test_second_heldout_and_third_tuning_sets_are_frozen_and_valid():
    """Both written blind from the labelling guide (without its review notes) by helpers that
    saw neither the code nor any other set; the held-out one was evaluation only until round 5."""
    assert hashlib.sha256(HELDOUT2.read_bytes()).hexdigest() == HELDOUT2_SHA256
    assert hashlib.sha256(TUNING3.read_bytes()).hexdigest() == TUNING3_SHA256
    for path, n, referenced in ((HELDOUT2, 320, 158), (TUNING3, 600, 290)):
        rows = load_rows(path)
        assert len(rows) == n and len({r["id"] for r in rows}) == n
        for row in rows:
            assert set(row) == {"id", "memory", "response", "label", "kind"}, row["id"]
            assert row["label"] in ("REFERENCED", "UNUSED"), row["id"]
            assert row["kind"] in KINDS, row["id"]
        assert set(Counter(r["kind"] for r in rows)) == KINDS
        assert Counter(r["label"] for r in rows)["REFERENCED"] == referenced


def test_second_set_figures_are_pinned():
    """Round 4's headline set, tuning data since round 5 (in-sample pins)."""
    fitted, lexical = fitted_and_lexical(load_rows(HELDOUT2))
    assert (fitted.tp, fitted.fp, fitted.fn, fitted.tn) == (99, 11, 59, 151)
    assert (lexical.tp, lexical.fp, lexical.fn, lexical.tn) == (95, 36, 63, 126)


# --- the third held-out set (round 5; tuning data since round 6) ---------------------------------

HELDOUT3 = ROOT / "analysis" / "data" / "detection_heldout3.jsonl"
HELDOUT3_SHA256 = "0b943a4e6f7f0ec2806d0b4d05afb286251044a6aa483405309fa65fdd42a997"


def test_third_heldout_set_is_frozen_and_valid():
    """Written blind from the labelling guide by two helpers that saw neither the code nor any
    other set, to kind quotas (every kind but "unrelated")."""
    check_quota_set(HELDOUT3, HELDOUT3_SHA256, referenced=168)


def test_third_set_figures_are_pinned():
    """Round 5's headline set (scored once then: fitted 0.797 / 0.655, docs/DETECTION.md), tuning
    data since round 6: in-sample pins, not held-out figures."""
    fitted, lexical = fitted_and_lexical(load_rows(HELDOUT3))
    assert (fitted.tp, fitted.fp, fitted.fn, fitted.tn) == (111, 20, 57, 152)
    assert (lexical.tp, lexical.fp, lexical.fn, lexical.tn) == (90, 51, 78, 121)


# --- the fourth held-out set (round 6) -----------------------------------------------------------

HELDOUT4 = ROOT / "analysis" / "data" / "detection_heldout4.jsonl"
HELDOUT4_SHA256 = "7ad34fd84f4910547e7024c62ee5fdd9678b057ad7010bf77c254f8dc772598c"


def test_fourth_heldout_set_is_frozen_and_valid():
    """Written blind from the labelling guide (sections 1-6) by four helpers that saw neither the
    code nor any other set, 85 pairs each to kind quotas; evaluation only."""
    check_quota_set(HELDOUT4, HELDOUT4_SHA256, 168, {"h4a-", "h4b-", "h4c-", "h4d-"})


# --- the fifth blind set (written in round 6, scored once in round 7) ----------------------------

HELDOUT5 = ROOT / "analysis" / "data" / "detection_heldout5.jsonl"
HELDOUT5_SHA256 = "e238a09f6b172ff6583bb8da301fd44833784430b84ba8d306096921e7282cc0"


def test_fifth_blind_set_is_frozen_and_valid():
    """Written blind like the fourth (four helpers, guide sections 1-6, the task sheet, other
    domains) after round 6's evaluation; scored once in round 7, never read by
    bench/fit_detection.py."""
    check_quota_set(HELDOUT5, HELDOUT5_SHA256, 165, {"h5a-", "h5b-", "h5c-", "h5d-"})


@pytest.mark.parametrize(
    ("path", "fitted_counts", "precision", "interval", "lexical_counts"),
    [
        # round 6's one run: the targets (0.85 with recall 0.70) are not met
        (HELDOUT4, (110, 30, 58, 142), 0.786, (0.711, 0.846), (95, 39, 73, 133)),
        # round 7's one run; its lexical figure was computed after that run
        (HELDOUT5, (108, 31, 57, 144), 0.777, (0.701, 0.838), (85, 42, 80, 133)),
    ],
    ids=["fourth", "fifth"],
)
def test_the_headline_sets_figures(path, fitted_counts, precision, interval, lexical_counts):
    """Each scored once under the rule written before it (docs/DETECTION.md, rounds 6 and 7):
    the fitted scorer (the default) at 0.68 with its Wilson interval, the lexical one at 0.40.
    Pooled (680 pairs: 0.781 / 0.655) they are the evidence page's headline."""
    from analysis.model import THRESHOLD

    assert THRESHOLD == 0.68
    fitted, lexical = fitted_and_lexical(load_rows(path))
    assert (fitted.tp, fitted.fp, fitted.fn, fitted.tn) == fitted_counts
    lo, hi = fitted.precision_interval
    assert round(fitted.precision, 3) == precision and (round(lo, 3), round(hi, 3)) == interval
    assert (lexical.tp, lexical.fp, lexical.fn, lexical.tn) == lexical_counts


# --- the sixth blind set (written in round 7, not yet scored) ------------------------------------

HELDOUT6 = ROOT / "analysis" / "data" / "detection_heldout6.jsonl"
HELDOUT6_SHA256 = "ce4dc313b2cc9ccedc63e3caf4e7416cd8f3dc6db631224c63f72d67dd8a5d19"


def test_sixth_blind_set_is_frozen_and_valid():
    """Written blind in round 7 (four helpers, guide sections 1-6, the task sheet, domains no
    earlier set covers) before the fifth set was scored, for the next round's one held-out run;
    never scored yet, and never read by bench/fit_detection.py."""
    check_quota_set(HELDOUT6, HELDOUT6_SHA256, 167, {"h6a-", "h6b-", "h6c-", "h6d-"})


@pytest.mark.parametrize("blind", [HELDOUT4, HELDOUT5, HELDOUT6])
def test_the_fitting_script_refuses_a_blind_set(blind):
    done = subprocess.run(
        [sys.executable, "bench/fit_detection.py", "--extra", str(blind)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "a held-out set is for its one held-out evaluation, not for fitting" in done.stderr
