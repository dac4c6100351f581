"""Measuring the response analyser against a labelled set: confusion matrix, precision and
recall of REFERENCED with 95 % Wilson intervals, and accuracy per kind.

Pure module (stdlib only, no Django). Used by bench/detection_bench.py and the tests; the two
sets are described in docs/DETECTION.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from analysis.api import REFERENCED, DetectionInput, Scorer, analyse

DATA = Path(__file__).resolve().parent / "data"
#: The tuning set: 240 pairs written alongside the scorer (features designed while looking at it).
REFERENCE_SET = DATA / "detection_reference.jsonl"
#: The first held-out set: 365 pairs labelled blind (docs/DETECTION_LABELLING_GUIDE.md); tuning
#: data since round 5 (docs/DETECTION.md).
HELDOUT_SET = DATA / "detection_heldout.jsonl"
#: Round 5's held-out set (340 pairs, written blind); tuning data since round 6.
HELDOUT3_SET = DATA / "detection_heldout3.jsonl"
#: Round 6's held-out set (340 pairs, written blind); the three before are tuning data.
#: With the fifth, the headline (two blind sets, scored once each).
HELDOUT4_SET = DATA / "detection_heldout4.jsonl"
#: Written blind in round 6, scored once in round 7 (340 pairs); with the fourth, the headline.
HELDOUT5_SET = DATA / "detection_heldout5.jsonl"
#: Written blind in round 7 and not scored: the next round's held-out set.
HELDOUT6_SET = DATA / "detection_heldout6.jsonl"


def load_rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a share; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Evaluation:
    n: int
    tp: int
    fp: int
    fn: int
    tn: int
    by_kind: dict[str, dict[str, int]]  # kind -> {"n", "correct", "referenced", "unused"}

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def accuracy(self) -> float:
        return (self.tp + self.tn) / self.n if self.n else 0.0

    @property
    def precision_interval(self) -> tuple[float, float]:
        return wilson(self.tp, self.tp + self.fp)

    @property
    def recall_interval(self) -> tuple[float, float]:
        return wilson(self.tp, self.tp + self.fn)

    def summary(self) -> dict:
        """A JSON-ready summary (rounded to 3 decimals)."""
        pl, ph = self.precision_interval
        rl, rh = self.recall_interval
        return {
            "n": self.n,
            "precision": round(self.precision, 3),
            "precision_ci95": [round(pl, 3), round(ph, 3)],
            "recall": round(self.recall, 3),
            "recall_ci95": [round(rl, 3), round(rh, 3)],
            "f1": round(self.f1, 3),
            "accuracy": round(self.accuracy, 3),
            "confusion": {"tp": self.tp, "fn": self.fn, "fp": self.fp, "tn": self.tn},
        }


def score_rows(rows: Sequence[dict], scorer: Scorer | None = None) -> list[float]:
    """One analyser score per row (the row's memory against the row's response)."""
    out = []
    for row in rows:
        (det,) = analyse(row["response"], [DetectionInput(row["id"], row["memory"])], scorer)
        out.append(det.score)
    return out


def evaluate(rows: Sequence[dict], scores: Sequence[float], threshold: float) -> Evaluation:
    tp = fp = fn = tn = 0
    by_kind: dict[str, dict[str, int]] = {}
    for row, score in zip(rows, scores, strict=True):
        predicted = score >= threshold
        actual = row["label"] == REFERENCED
        tp += predicted and actual
        fp += predicted and not actual
        fn += actual and not predicted
        tn += not predicted and not actual
        k = by_kind.setdefault(row["kind"], {"n": 0, "correct": 0, "referenced": 0, "unused": 0})
        k["n"] += 1
        k["correct"] += predicted == actual
        k["referenced" if actual else "unused"] += 1
    return Evaluation(len(rows), tp, fp, fn, tn, dict(sorted(by_kind.items())))
