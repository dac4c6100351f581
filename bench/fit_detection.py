"""Refit analysis/model.py (logistic regression over the lexical scorer's features)
from the tuning sets, reproducibly, and report cross-validated figures.

    .venv/bin/python bench/fit_detection.py [--folds 5] [--seed 18] [--l2 1.0]
        [--target 0.85] [--write] [--embedding DIR] [--extra FILE ...]

Data: analysis/data/detection_reference.jsonl + detection_tuning2.jsonl + detection_tuning3.jsonl
(its two halves, ids t3a-/t3b-, are two sets in the per-set views) + the three earlier held-out
sets (tuning data since rounds 5 and 6 of docs/DETECTION.md; SETS below), and any further tuning set
given with --extra (JSON lines with memory, response, label). The current held-out set is never
read here, and --extra refuses it. Folds are
grouped by memory text (every pair of one memory stays in one fold) and stratified by label,
with a fixed seed.

Two threshold rules, both fixed before any held-out evaluation, on a 0.01 grid of out-of-fold
probabilities over the pooled tuning data: rule A (the model's THRESHOLD) is the lowest
threshold whose precision of REFERENCED reaches `--target` (best recall at that precision);
rule B (MATCHED_RECALL_THRESHOLD) is the highest threshold whose recall is still at least the
lexical default's recall on the same pairs, to compare precision at equal recall. Reported:

0. the lexical default on the same pairs;
1. nested cross-validation — each outer fold's thresholds are chosen by the rules on an inner
   cross-validation of its own training folds, so the pooled outer predictions are honest;
2. a split check: fit on reference + half of tuning2's memories, measure on the other half,
   both ways; and leave one set out: fit on the other sets (thresholds by the rules on their
   own out-of-fold probabilities), measure on the set left out;
3. the final fit on everything, with the thresholds chosen by the rules on plain out-of-fold
   probabilities. `--write` puts its coefficients into analysis/model.py.

`--embedding DIR` adds the optional static embedding's best-window cosine as an extra feature
(experiment only; it is never written into the default model).
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analysis.api import REFERENCED  # noqa: E402
from analysis.evaluation import DATA, load_rows, wilson  # noqa: E402
from analysis.lexical import LexicalScorer  # noqa: E402
from analysis.model import FEATURES, apply_veto, feature_vector, vetoed  # noqa: E402

MODEL = ROOT / "analysis" / "model.py"
#: Round 5 (DETECTION.md) fits on the two earlier held-out sets too: each had been evaluated (the
#: first in four rounds, the second twice), so neither could still give a held-out figure; round
#: 6 adds the third (scored once in round 5). The round's held-out set is the fourth, never read
#: here.
SETS = (
    "detection_reference.jsonl",
    "detection_tuning2.jsonl",
    "detection_tuning3.jsonl",
    "detection_heldout.jsonl",
    "detection_heldout2.jsonl",
    "detection_heldout3.jsonl",
)
GRID = [round(0.01 * i, 2) for i in range(1, 100)]


def featurise(rows: list[dict], embedding: Path | None) -> tuple[list[list[float]], list]:
    """Feature vectors, and per row its lexical features when a veto decides it (else None)."""
    lexical = LexicalScorer()
    emb = None
    if embedding:
        from analysis.embedding import EmbeddingScorer, StaticEmbedding

        emb = EmbeddingScorer(StaticEmbedding.load(embedding))
    xs, vetoes = [], []
    for row in rows:
        (f,) = lexical.features_many([row["memory"]], row["response"])
        x = list(feature_vector(f))
        if emb is not None:
            ((cos, _),) = emb.best([row["memory"]], row["response"])
            x.append(cos or 0.0)
        xs.append(x)
        vetoes.append(f if vetoed(f) else None)
    return xs, vetoes


# --- logistic regression, pure Python (Newton / IRLS with an L2 penalty) ----------------------


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a is small and positive definite)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c and m[r][c]:
                k = m[r][c] / m[c][c]
                m[r] = [x - k * y for x, y in zip(m[r], m[c], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def fit(xs, ys, l2: float, vetoes=None) -> tuple[float, list[float]]:
    """Intercept and raw-scale coefficients; the penalty applies to standardised features.
    Rows decided by a veto (`vetoes`) are left out: the model only ranks the others."""
    if vetoes is not None:
        kept = [i for i, v in enumerate(vetoes) if v is None]
        xs, ys = [xs[i] for i in kept], [ys[i] for i in kept]
    d = len(xs[0])
    mean = [sum(x[j] for x in xs) / len(xs) for j in range(d)]
    sd = [math.sqrt(sum((x[j] - mean[j]) ** 2 for x in xs) / len(xs)) or 1.0 for j in range(d)]
    zs = [[1.0] + [(x[j] - mean[j]) / sd[j] for j in range(d)] for x in xs]
    w = [0.0] * (d + 1)
    for _ in range(50):
        grad = [0.0] * (d + 1)
        hess = [[0.0] * (d + 1) for _ in range(d + 1)]
        for z, y in zip(zs, ys, strict=True):
            p = sigmoid(sum(a * b for a, b in zip(w, z, strict=True)))
            g = p - y
            h = p * (1 - p)
            for i in range(d + 1):
                grad[i] += g * z[i]
                hi = h * z[i]
                row = hess[i]
                for j in range(i, d + 1):
                    row[j] += hi * z[j]
        for i in range(d + 1):
            for j in range(i):
                hess[i][j] = hess[j][i]
        for i in range(1, d + 1):
            grad[i] += l2 * w[i]
            hess[i][i] += l2
        step = solve(hess, grad)
        w = [a - b for a, b in zip(w, step, strict=True)]
        if max(abs(s) for s in step) < 1e-9:
            break
    coef = [w[j + 1] / sd[j] for j in range(d)]
    intercept = w[0] - sum(c * m for c, m in zip(coef, mean, strict=True))
    return intercept, coef


def predict(model: tuple[float, list[float]], xs, vetoes) -> list[float]:
    b, coef = model
    out = []
    for x, v in zip(xs, vetoes, strict=True):
        p = sigmoid(b + sum(c * a for c, a in zip(coef, x, strict=True)))
        out.append(p if v is None else apply_veto(p, v))
    return out


# --- folds, thresholds, figures ---------------------------------------------------------------


def set_name(path: Path, row: dict) -> str:
    """The set a row belongs to: its file, or the half of tuning3 it was written in."""
    if path.stem == "detection_tuning3" and row["id"][:3] in ("t3a", "t3b"):
        return f"detection_tuning{row['id'][1:3]}"
    return path.stem


def group_key(memory: str) -> str:
    return re.sub(r"\W+", " ", memory.lower()).strip()


def folds(rows: list[dict], k: int, seed: int) -> list[int]:
    """Fold of each row: groups (one memory) shuffled with the seed, then dealt round-robin
    within strata (groups with / without a REFERENCED pair) so labels stay balanced."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(group_key(row["memory"]), []).append(i)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    strata = sorted(keys, key=lambda g: any(rows[i]["label"] == REFERENCED for i in groups[g]))
    fold = [0] * len(rows)
    for n, g in enumerate(strata):
        for i in groups[g]:
            fold[i] = n % k
    return fold


def confusion(ys, ps, t) -> tuple[int, int, int, int]:
    tp = sum(1 for y, p in zip(ys, ps, strict=True) if y and p >= t)
    fp = sum(1 for y, p in zip(ys, ps, strict=True) if not y and p >= t)
    fn = sum(1 for y, p in zip(ys, ps, strict=True) if y and p < t)
    return tp, fp, fn, len(ys) - tp - fp - fn


def precision(c) -> float:
    return c[0] / (c[0] + c[1]) if c[0] + c[1] else 0.0


def choose_threshold(ys, ps, target: float) -> float:
    """Rule A: the lowest grid threshold whose precision reaches `target` (best recall)."""
    for t in GRID:
        c = confusion(ys, ps, t)
        if c[0] and precision(c) >= target:
            return t
    return GRID[-1]


def matched_recall_threshold(ys, ps, lexical) -> float:
    """Rule B: the highest grid threshold whose recall is at least the lexical default's recall
    on the same rows (`lexical`: its REFERENCED verdicts), to compare precision at equal recall."""
    tp = sum(1 for y, v in zip(ys, lexical, strict=True) if y and v)
    want = tp / sum(ys)
    best = GRID[0]
    for t in GRID:
        c = confusion(ys, ps, t)
        if c[0] / (c[0] + c[2]) >= want:
            best = t
    return best


def oof(xs, ys, vetoes, fold, k, l2, idx=None) -> list[float]:
    """Out-of-fold probabilities for the rows in idx (all rows by default)."""
    idx = list(range(len(ys))) if idx is None else idx
    out = {}
    for f in range(k):
        train = [i for i in idx if fold[i] != f]
        test = [i for i in idx if fold[i] == f]
        if not test:
            continue
        model = fit([xs[i] for i in train], [ys[i] for i in train], l2, [vetoes[i] for i in train])
        ps = predict(model, [xs[i] for i in test], [vetoes[i] for i in test])
        for i, p in zip(test, ps, strict=True):
            out[i] = p
    return [out[i] for i in idx]


def line(name: str, c) -> str:
    tp, fp, fn, tn = c
    p = precision(c)
    r = tp / (tp + fn) if tp + fn else 0.0
    (pl, ph), (rl, rh) = wilson(tp, tp + fp), wilson(tp, tp + fn)
    return (
        f"{name:38} P {p:.3f} ({pl:.3f}-{ph:.3f})  R {r:.3f} ({rl:.3f}-{rh:.3f})  "
        f"TP {tp} FP {fp} FN {fn} TN {tn}"
    )


def write_model(model, threshold: float, matched: float, note: str) -> None:
    intercept, coef = model
    text = MODEL.read_text(encoding="utf-8")
    begin = text.index("# --- fitted by bench/fit_detection.py: BEGIN")
    begin = text.index("\n", begin) + 1
    end = text.index("# --- fitted by bench/fit_detection.py: END")
    body = [*textwrap.wrap(note, 98, initial_indent="# ", subsequent_indent="#   ")]
    body += [f"INTERCEPT = {intercept:.6f}", "COEFFICIENTS = ("]
    body += [f"    {c:.6f},  # {name}" for c, name in zip(coef, FEATURES, strict=True)]
    body += [")", f"THRESHOLD = {threshold:.2f}", f"MATCHED_RECALL_THRESHOLD = {matched:.2f}", ""]
    MODEL.write_text(text[:begin] + "\n".join(body) + text[end:], encoding="utf-8")


def subset(values, sel):
    return [v for v, s in zip(values, sel, strict=True) if s]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--embedding", type=Path)
    ap.add_argument("--extra", type=Path, action="append", default=[], help="another tuning set")
    args = ap.parse_args()
    if any(name in p.name for name in ("heldout4", "heldout5", "heldout6") for p in args.extra):
        ap.error("a held-out set is for its one held-out evaluation, not for fitting")
    if args.write and args.embedding:
        ap.error("--write fits the default model, which has no embedding feature")

    paths = [DATA / name for name in SETS] + list(args.extra)
    rows = [dict(r, set=set_name(p, r)) for p in paths for r in load_rows(p)]
    set_names = list(dict.fromkeys(r["set"] for r in rows))
    n = len(rows)
    blind = [r["set"] == "detection_tuning2" for r in rows]
    ys = [int(r["label"] == REFERENCED) for r in rows]
    xs, vetoes = featurise(rows, args.embedding)
    default = LexicalScorer()
    lexical = [default.score(r["memory"], r["response"])[0] >= default.threshold for r in rows]
    k = args.folds
    fold = folds(rows, k, args.seed)
    print(f"{n} tuning pairs ({sum(ys)} REFERENCED), {len(xs[0])} features, {k} folds")
    print(f"L2 penalty {args.l2} on standardised features, target precision {args.target}")
    decided = sum(v is not None for v in vetoes)
    print(f"{decided} pairs decided by a veto (lexical contradiction, conflict or score 0)")
    views = (("pooled", [True] * n),) + tuple(
        (f"{name.removeprefix('detection_')} only", [r["set"] == name for r in rows])
        for name in set_names
    )
    print("\n0. lexical default (threshold 0.40; tuning2 is out of sample for it)")
    for name, sel in views:
        c = confusion(subset(ys, sel), [float(v) for v in subset(lexical, sel)], 0.5)
        print("  " + line(name, c))

    # 1. nested CV: thresholds chosen on inner out-of-fold probabilities of each training part
    pred_a, pred_b = [False] * n, [False] * n
    for f in range(k):
        train = [i for i in range(n) if fold[i] != f]
        test = [i for i in range(n) if fold[i] == f]

        def tr(v, train=train):
            return [v[i] for i in train]

        inner = oof(tr(xs), tr(ys), tr(vetoes), folds(tr(rows), k, args.seed + 1 + f), k, args.l2)
        ta = choose_threshold(tr(ys), inner, args.target)
        tb = matched_recall_threshold(tr(ys), inner, tr(lexical))
        model = fit(tr(xs), tr(ys), args.l2, tr(vetoes))
        ps = predict(model, [xs[i] for i in test], [vetoes[i] for i in test])
        for i, p in zip(test, ps, strict=True):
            pred_a[i], pred_b[i] = p >= ta, p >= tb
        print(f"  outer fold {f}: rule A threshold {ta:.2f}, rule B threshold {tb:.2f}")
    for rule, pred in (("A (precision >= target)", pred_a), ("B (lexical's recall)", pred_b)):
        print(f"\n1. nested {k}-fold cross-validation, rule {rule}")
        for name, sel in views:
            c = confusion(subset(ys, sel), [float(p) for p in subset(pred, sel)], 0.5)
            print("  " + line(name, c))

    # 2. split check on tuning2's memories
    def train_and_test(train: list[int], test: list[int]):
        """Both rules' thresholds chosen out-of-fold inside ``train``, the model fitted on it,
        and its probabilities and labels on ``test``."""

        def tr(v):
            return [v[i] for i in train]

        inner = oof(tr(xs), tr(ys), tr(vetoes), folds(tr(rows), k, args.seed), k, args.l2)
        ta = choose_threshold(tr(ys), inner, args.target)
        tb = matched_recall_threshold(tr(ys), inner, tr(lexical))
        model = fit(tr(xs), tr(ys), args.l2, tr(vetoes))
        ps = predict(model, [xs[i] for i in test], [vetoes[i] for i in test])
        return ta, tb, ps, [ys[i] for i in test]

    print("\n2. fit on reference + half of tuning2's memories, measure on the other half")
    t2 = [i for i in range(n) if blind[i]]
    side = dict(zip(t2, folds([rows[i] for i in t2], 2, args.seed), strict=True))
    for h in (0, 1):
        train = [i for i in range(n) if side.get(i, -1) != h]
        test = [i for i in t2 if side[i] == h]

        ta, tb, ps, yt = train_and_test(train, test)
        lx = confusion(yt, [float(lexical[i]) for i in test], 0.5)
        print("  " + line(f"half {h}: rule A (t {ta:.2f})", confusion(yt, ps, ta)))
        print("  " + line(f"half {h}: rule B (t {tb:.2f})", confusion(yt, ps, tb)))
        print("  " + line(f"half {h}: lexical default", lx))

    print("\n2b. leave one set out: fit on the other sets, measure on the one left out")
    for name in set_names:
        train = [i for i in range(n) if rows[i]["set"] != name]
        test = [i for i in range(n) if rows[i]["set"] == name]

        ta, tb, ps, yt = train_and_test(train, test)
        short = name.removeprefix("detection_")
        print("  " + line(f"{short}: rule A (t {ta:.2f})", confusion(yt, ps, ta)))
        print("  " + line(f"{short}: rule B (t {tb:.2f})", confusion(yt, ps, tb)))
        print(
            "  "
            + line(
                f"{short}: lexical default", confusion(yt, [float(lexical[i]) for i in test], 0.5)
            )
        )

    # 3. final model
    probs = oof(xs, ys, vetoes, fold, k, args.l2)
    ta = choose_threshold(ys, probs, args.target)
    tb = matched_recall_threshold(ys, probs, lexical)
    model = fit(xs, ys, args.l2, vetoes)
    print(f"\n3. final fit on all {n} pairs; out-of-fold thresholds: A {ta:.2f}, B {tb:.2f}")
    for name, sel in views:
        for rule, t in (("A", ta), ("B", tb)):
            c = confusion(subset(ys, sel), subset(probs, sel), t)
            print("  " + line(f"out-of-fold {name}, rule {rule}", c))
    print("  out-of-fold sweep (pooled P / R   tuning2 P / R):")
    yb, pb = subset(ys, blind), subset(probs, blind)
    for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        c, cb = confusion(ys, probs, t), confusion(yb, pb, t)
        print(
            f"    t {t:.2f}: {precision(c):.3f} / {c[0] / (c[0] + c[2]):.3f}   "
            f"{precision(cb):.3f} / {cb[0] / (cb[0] + cb[2]):.3f}"
        )
    names = [*FEATURES, "embedding_cosine"][: len(xs[0])]
    print(f"  intercept {model[0]:+.4f}")
    for name, c in zip(names, model[1], strict=True):
        print(f"  {name:24} {c:+.4f}")
    if args.write:
        extra = "".join(f" --extra {p.name}" for p in args.extra)
        note = (
            f"bench/fit_detection.py --folds {k} --seed {args.seed} --l2 {args.l2} "
            f"--target {args.target}{extra}: {n} pairs"
        )
        write_model(model, ta, tb, note)
        print(f"\nwrote {MODEL.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
