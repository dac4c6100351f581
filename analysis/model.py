"""A calibrated response-analysis scorer: logistic regression over the lexical scorer's features.

`LexicalScorer` (analysis/lexical.py) reduces a (memory, response) pair to one hand-built score.
`FittedScorer` keeps everything it measures — that score, the coverage and proximity of the
memory in its best window, the best clause, the share of distinctive weight matched, the weight
of the heaviest distinctive term that is missing, and the checks that fired (contradiction,
another entity or value, different numbers, single shared term, exact anchor, a "no longer true"
cue the memory lacks, a negative memory, a dropped quoted question; round 4: the share
matched through related words, the heaviest term matched, a missing or swapped name; round 6:
another member of a closed class) — and combines them with weights fitted by logistic regression
on the tuning sets (analysis/data/detection_reference.jsonl, detection_tuning2.jsonl,
detection_tuning3.jsonl and the three earlier held-out sets; bench/fit_detection.py). The output
is a probability-like score in [0, 1].

Two rules decide before the model does: a contradiction found by the lexical checks caps the
score below any threshold (the reason keeps the lexical "contradicts the memory" note: a
contradiction is not a use), and a pair with nothing distinctive in common (lexical score 0)
scores 0. The model is fitted on the other pairs only.

Two thresholds are fitted (docs/DETECTION.md, "round 3"): THRESHOLD, the lowest whose
cross-validated precision reaches 0.85 on the tuning data, and MATCHED_RECALL_THRESHOLD, where
its recall equals the lexical scorer's. This model is the service default
(`RMS_DETECTION_SCORER`, analysis/embedding.py); its held-out figures are in the docs.

The coefficients below are written by `bench/fit_detection.py` (reproducible: no randomness
other than a fixed-seed fold split); do not edit them by hand. Pure module: stdlib only, no
Django, deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from analysis.lexical import LexicalFeatures, LexicalScorer

#: Names of the model's inputs, in the order of `feature_vector` and `COEFFICIENTS`.
FEATURES = (
    "lexical_score",
    "coverage",
    "proximity",
    "clause",
    "core_share",
    "missing_weight",
    "log_core_terms",
    "different_numbers",
    "single_term",
    "anchored",
    "retraction",
    "memory_negated_x_score",
    "quoted",
    "other_number_x_score",
    "first_missing",
    "unaddressed",
    "negation_dropped",
    "cue_dropped",
    "impersonal",
    "related_share",
    "top_weight",
    "name_missing",
    "name_swap",
    "class_swap",
)


def feature_vector(f: LexicalFeatures) -> tuple[float, ...]:
    """The model's inputs for one pair (see FEATURES)."""
    return (
        f.score,
        f.coverage,
        f.proximity,
        f.clause,
        f.core_share,
        f.missing_weight,
        math.log1p(f.core_terms),
        float(f.different_numbers),
        float(f.single_term),
        float(f.anchored),
        float(f.retraction),
        f.score * f.memory_negated,
        float(f.quoted),
        f.score * f.other_number,
        float(f.first_missing),
        float(f.unaddressed),
        float(f.negation_dropped),
        float(f.cue_dropped),
        float(f.impersonal),
        f.related_share,
        f.top_weight,
        float(f.name_missing),
        float(f.name_swap),
        float(f.class_swap),
    )


#: The score of a contradicted pair is capped here (below any threshold this model is used with).
VETO_CAP = 0.05


def vetoed(f: LexicalFeatures) -> bool:
    """Decided by rule, not by the model: a lexical contradiction (negated, no longer true, or
    a conflicting name or entity), or nothing distinctive shared at all (lexical score 0)."""
    return f.contradiction or f.conflict or f.score <= 0.0


def apply_veto(p: float, f: LexicalFeatures) -> float:
    """The model's probability after the vetoes: 0 when nothing distinctive is shared, at most
    VETO_CAP for a lexical contradiction, unchanged otherwise."""
    if f.score <= 0.0:
        return 0.0
    return min(p, VETO_CAP) if vetoed(f) else p


def restated(f: LexicalFeatures) -> bool:
    """Every term of the memory, in its own words, and every adjacent pair of them near each
    other in one window, with no check against it: a restatement, which is a use whatever the
    model makes of the rest (it under-rates short memories restated without "you")."""
    return (
        f.coverage >= 0.999
        and f.proximity >= 0.999
        and f.score >= 0.99
        and f.related_share == 0.0
        and not (f.quoted or f.retraction or f.different_numbers or f.other_number or vetoed(f))
    )


# --- fitted by bench/fit_detection.py: BEGIN -------------------------------------------------
# bench/fit_detection.py --folds 5 --seed 18 --l2 1.0 --target 0.85: 2265 pairs
INTERCEPT = -2.678403
COEFFICIENTS = (
    2.487506,  # lexical_score
    1.432493,  # coverage
    -1.774487,  # proximity
    0.391469,  # clause
    -1.027746,  # core_share
    -0.605210,  # missing_weight
    0.995886,  # log_core_terms
    -0.844810,  # different_numbers
    0.184617,  # single_term
    0.446290,  # anchored
    -1.610224,  # retraction
    2.317837,  # memory_negated_x_score
    0.915059,  # quoted
    -1.451277,  # other_number_x_score
    0.336301,  # first_missing
    -0.679472,  # unaddressed
    -0.172320,  # negation_dropped
    0.209120,  # cue_dropped
    -1.212971,  # impersonal
    2.451186,  # related_share
    0.941214,  # top_weight
    -0.014957,  # name_missing
    -0.506284,  # name_swap
    -1.583467,  # class_swap
)
THRESHOLD = 0.68
MATCHED_RECALL_THRESHOLD = 0.70
# --- fitted by bench/fit_detection.py: END ---------------------------------------------------


def probability(
    x: Sequence[float],
    intercept: float = INTERCEPT,
    coefficients: Sequence[float] = COEFFICIENTS,
) -> float:
    z = intercept + sum(w * v for w, v in zip(coefficients, x, strict=True))
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass(frozen=True)
class FittedScorer:
    """Logistic regression over `LexicalScorer` features; REFERENCED when score >= threshold."""

    threshold: float = THRESHOLD
    lexical: LexicalScorer = field(default_factory=LexicalScorer)
    intercept: float = INTERCEPT
    coefficients: tuple[float, ...] = COEFFICIENTS

    def score(self, content: str, response: str) -> tuple[float, str]:
        return self.score_many([content], response)[0]

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]:
        out = []
        for f in self.lexical.features_many(contents, response):
            p = probability(feature_vector(f), self.intercept, self.coefficients)
            p = apply_veto(p, f)
            if p < self.threshold and restated(f):
                reason = f"fitted {p:.2f}, restated in full: {self.threshold:.2f} ({f.reason})"
                out.append((self.threshold, reason))
                continue
            verdict = ">=" if p >= self.threshold else "<"
            out.append((p, f"fitted {p:.2f} {verdict} {self.threshold:.2f} ({f.reason})"))
        return out
