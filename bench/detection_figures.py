"""Writes dashboard/detection_figures.json, the detection figures the evidence page shows, from
the code and the frozen sets (nothing typed by hand but the one figure of code that is gone).

    .venv/bin/python bench/detection_figures.py [--out dashboard/detection_figures.json]

Headline: the service's scorer (``analysis.embedding.configured_scorer`` without settings) on
the fourth and fifth held-out sets pooled (docs/DETECTION.md, rounds 6 and 7: each written blind and
scored once), with each set's own figure beside it, and round 7's cross-encoder experiment.
Below: the lexical scorer on the reference (tuning) set, in-sample, with its threshold sweep,
per-kind accuracy and the long responses check of ``bench/detection_bench.py``. The figures
are the ones docs/DETECTION.md publishes; ``tests/feedback/test_detection_heldout.py`` pins the
held-out ones.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from detection_bench import (  # noqa: E402
    SWEEP,
    counts,
    evaluation_summary,
    load_rows,
    long_responses,
    prf,
    score_rows,
)

from analysis.api import DEFAULT_SCORER, REFERENCED  # noqa: E402
from analysis.embedding import DEFAULT_SCORER_NAME, configured_scorer  # noqa: E402
from analysis.evaluation import HELDOUT4_SET, HELDOUT5_SET, REFERENCE_SET  # noqa: E402

OUT = ROOT / "dashboard" / "detection_figures.json"
TARGETS = {"precision": 0.85, "recall": 0.70, "rfc_precision_floor": 0.60}
#: The first held-out set measured on the code before the detection rounds (DETECTION.md round 1):
#: that code is gone, so its figure is kept here.
BASELINE_SCORER = {
    "precision": 0.617,
    "precision_ci95": [0.541, 0.687],
    "recall": 0.582,
    "recall_ci95": [0.508, 0.652],
    "f1": 0.599,
    "confusion": {"tp": 103, "fn": 74, "fp": 64, "tn": 124},
}


#: The blind sets of the headline: (name, file, the round that scored it once).
BLIND_SETS = (("fourth", HELDOUT4_SET, 6), ("fifth", HELDOUT5_SET, 7))

#: Round 7 (docs/DETECTION.md): the 6-layer cross-encoder averaged with the fitted scorer, on the
#: fifth set under the pre-registered rule. Its model is trained in a side venv and not shipped
#: (about 50 ms per 20 pairs on one core, over the 20 ms budget), so its figure is kept here.
CROSS_ENCODER_ON_HELDOUT5 = {
    "precision": 0.751,
    "recall": 0.842,
    "n": 340,
    "confusion": {"tp": 139, "fn": 26, "fp": 46, "tn": 129},
}


def r3(x: float) -> float:
    return round(x, 3)


def reference_figures(seed: int = 7) -> dict:
    """The lexical scorer on the reference set (in-sample): what the lower half of the page
    shows."""
    rows = load_rows(REFERENCE_SET)
    scores = score_rows(rows)
    t = DEFAULT_SCORER.threshold
    c = counts(rows, scores, t)
    p, r, f1 = prf(c)
    sweep = []
    for threshold in SWEEP:
        pt, rt, ft = prf(counts(rows, scores, threshold))
        sweep.append({"threshold": threshold, "precision": r3(pt), "recall": r3(rt), "f1": r3(ft)})
    kinds: dict[tuple[str, str], list[bool]] = {}
    for row, score in zip(rows, scores, strict=True):
        kinds.setdefault((row["kind"], row["label"]), []).append(
            (score >= t) == (row["label"] == REFERENCED)
        )
    by_kind = [
        {"kind": kind, "label": label, "correct": sum(oks), "n": len(oks)}
        for (kind, label), oks in sorted(kinds.items(), key=lambda kv: -sum(kv[1]) / len(kv[1]))
    ]
    lengths = {5: "~100 words", 20: "~350 words", 100: "~1,700 words"}
    mixed = []
    for n, _, cn in long_responses(rows, t, seed):  # bench/detection_bench.py's check
        pn, rn, fn_ = prf(cn)
        mixed.append(
            {"n": n, "length": lengths[n], "precision": r3(pn), "recall": r3(rn), "f1": r3(fn_)}
        )
    return {
        "reference_set": f"{len(rows)} human-labelled (memory, response) pairs: "
        f"{c['tp'] + c['fn']} REFERENCED, {c['fp'] + c['tn']} UNUSED",
        "threshold": t,
        "headline": {
            "precision": r3(p),
            "recall": r3(r),
            "f1": r3(f1),
            "accuracy": r3((c["tp"] + c["tn"]) / len(rows)),
        },
        "confusion": c,
        "sweep": sweep,
        "long_responses": mixed,
        "by_kind": by_kind,
    }


def blind_figures(scorer) -> tuple[dict, list[dict], dict]:
    """The service's scorer on the blind sets pooled (with per-kind accuracy), on each set, and
    the lexical scorer on the sets pooled."""
    rows: list[dict] = []
    scores: list[float] = []
    lexical: list[float] = []
    per_set = []
    for name, path, scored_in in BLIND_SETS:
        set_rows = load_rows(path)
        set_scores = score_rows(set_rows, scorer)
        summary = evaluation_summary(set_rows, set_scores, scorer.threshold)
        summary.pop("by_kind")
        referenced = sum(r["label"] == REFERENCED for r in set_rows)
        per_set.append({"name": name, "round": scored_in, "referenced": referenced, **summary})
        rows += set_rows
        scores += set_scores
        lexical += score_rows(set_rows, DEFAULT_SCORER)
    pooled = evaluation_summary(rows, scores, scorer.threshold)
    pooled["referenced"] = sum(r["label"] == REFERENCED for r in rows)
    lexical_pooled = evaluation_summary(rows, lexical, DEFAULT_SCORER.threshold)
    lexical_pooled.pop("by_kind")
    return pooled, per_set, lexical_pooled


def figures() -> dict:
    scorer = configured_scorer({})
    fresh, per_set, lexical_fresh = blind_figures(scorer)
    by_kind = sorted(fresh["by_kind"], key=lambda k: k["correct"] / k["n"])
    weakest = ", ".join(
        f"{k['kind'].replace('_', ' ')} {k['correct']}/{k['n']}" for k in by_kind[:3]
    )
    met = fresh["precision"] >= TARGETS["precision"] and fresh["recall"] >= TARGETS["recall"]
    out = {
        "source": "docs/DETECTION.md",
        "measured_on": dt.datetime.now(dt.UTC).date().isoformat(),
        "command": ".venv/bin/python bench/detection_figures.py",
        "method": f"response_analysis ({type(scorer).__name__}, RMS_DETECTION_SCORER="
        f"{DEFAULT_SCORER_NAME}: a logistic combination of the lexical scorer's features, fitted "
        "on six tuning sets), REFERENCED vs UNUSED",
        "heldout_threshold": scorer.threshold,
        "targets": TARGETS,
        "heldout_set": f"{fresh['n']} pairs in {len(per_set)} sets written and labelled blind "
        f"from docs/DETECTION_LABELLING_GUIDE.md after every tuning choice "
        f"({fresh['referenced']} REFERENCED); the scorer and its threshold were written down "
        "before each set's one evaluation",
        "heldout": fresh,
        "heldout_by_kind": fresh.pop("by_kind"),
        "heldout_sets": per_set,
        "heldout_cross_encoder": CROSS_ENCODER_ON_HELDOUT5,
        "heldout_lexical": lexical_fresh,
        "heldout_baseline": BASELINE_SCORER,
        **reference_figures(),
    }
    out["caveats"] = [
        "The headline pools the fourth and fifth held-out sets: each written blind after every "
        "tuning choice and scored once, with the scorer and its threshold fixed before "
        "(docs/DETECTION.md, rounds 6 and 7). The three earlier held-out sets are tuning data.",
        "A 6-layer cross-encoder averaged with this scorer (round 7, not shipped: about 50 ms "
        "per 20 pairs on one core, over the 20 ms budget) finds more references on the fifth "
        "set but is less precise; neither reaches the targets.",
        f"The targets (held-out precision >= {TARGETS['precision']:.2f} with recall >= "
        f"{TARGETS['recall']:.2f}) are {'met' if met else 'NOT met'}: precision "
        f"{fresh['precision']:.3f}, recall {fresh['recall']:.3f}.",
        f"Weakest kinds on the held-out set: {weakest}.",
        "Reference-set figures are the lexical scorer's, in-sample (features designed while "
        "looking at that set).",
        "English only; negation is scope-based, not parsed; no embedding model ships "
        "(optional, RMS_EMBEDDING_MODEL).",
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    data = figures()
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    h = data["heldout"]
    print(f"wrote {args.out}: held-out precision {h['precision']:.3f}, recall {h['recall']:.3f}")


if __name__ == "__main__":
    main()
