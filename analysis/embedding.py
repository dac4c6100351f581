"""Optional embedding scorer for the response analyser, used only when a local model directory is
configured (``RMS_EMBEDDING_MODEL``). Nothing is ever downloaded: the model is read from disk.

On-disk format ("rms-static-embedding/1"), a directory with:

- ``config.json``: ``{"format": "rms-static-embedding/1", "dim": D, "threshold": t,
  "low": l, "high": h}`` — ``low``/``high`` map cosine similarity to a score in [0, 1]
  (``(cos - low) / (high - low)``, clamped); fit them and ``threshold`` on the reference set.
- ``vocab.txt``: one token per line (lower-case words).
- ``vectors.f32``: ``len(vocab) × D`` little-endian float32, row i is the vector of line i.

A text is embedded as the mean of its known words' vectors (a static, model2vec-like model); a
memory is compared with the best window of 3 sentences of the response. ``CombinedScorer`` takes
the lexical score, and raises it to the embedding score only when the lexical reason reports no
contradiction, no other entity and no different numbers: the lexical checks keep their veto.

Pure module, stdlib only (``array``), no Django import.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import mul
from pathlib import Path

from analysis.lexical import DEFAULT_SCORER, LexicalScorer
from analysis.text import retraction_cues, without_quoted_question
from analysis.types import Scorer

logger = logging.getLogger(__name__)

FORMAT = "rms-static-embedding/1"
ENV_VAR = "RMS_EMBEDDING_MODEL"
SCORER_VAR = "RMS_DETECTION_SCORER"
#: What the service uses when RMS_DETECTION_SCORER is unset (the pre-registered switch rule of
#: round 4 chose the fitted combination: docs/DETECTION.md).
DEFAULT_SCORER_NAME = "fitted"

_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SENTENCE_RE = re.compile(r"(?<=[.!?\n])\s+")
_VETO = ("contradicts", "different entity", "different numbers")


class EmbeddingModelError(ValueError):
    """The configured directory is not a model in the documented format."""


@dataclass(frozen=True)
class StaticEmbedding:
    dim: int
    index: dict[str, int]
    vectors: array  # float32, len(index) * dim
    threshold: float = 0.5
    low: float = 0.2
    high: float = 0.8

    @classmethod
    def load(cls, directory: str | os.PathLike) -> StaticEmbedding:
        root = Path(directory)
        try:
            config = json.loads((root / "config.json").read_text(encoding="utf-8"))
            vocab = (root / "vocab.txt").read_text(encoding="utf-8").splitlines()
            raw = (root / "vectors.f32").read_bytes()
        except (OSError, ValueError) as exc:
            raise EmbeddingModelError(f"{root}: not a readable {FORMAT} model ({exc})") from exc
        if config.get("format") != FORMAT:
            raise EmbeddingModelError(f"{root}: format is {config.get('format')!r}, not {FORMAT}")
        dim = int(config["dim"])
        vectors = array("f")
        vectors.frombytes(raw)
        if sys.byteorder != "little":
            vectors.byteswap()
        if dim <= 0 or len(vectors) != dim * len(vocab):
            raise EmbeddingModelError(
                f"{root}: {len(vectors)} floats for {len(vocab)} tokens of dimension {dim}"
            )
        return cls(
            dim,
            {w: i for i, w in enumerate(vocab)},
            vectors,
            float(config.get("threshold", 0.5)),
            float(config.get("low", 0.2)),
            float(config.get("high", 0.8)),
        )

    def embed(self, text: str) -> list[float] | None:
        """Mean vector of the text's known words, or None when none is known."""
        total, known = self.embed_sum(text)
        return [v / known for v in total] if known else None

    def embed_sum(self, text: str) -> tuple[list[float], int]:
        """Sum of the text's known words' vectors (zeros when none) and how many were known.
        The sum runs column by column in C (``zip(*rows)``): a 2,000-word response in a few ms.
        """
        dim, index, vectors = self.dim, self.index, self.vectors
        rows = [
            vectors[i * dim : (i + 1) * dim]
            for i in map(index.get, _WORD_RE.findall(text.lower()))
            if i is not None
        ]
        if not rows:
            return [0.0] * dim, 0
        return [sum(col) for col in zip(*rows, strict=True)], len(rows)

    @staticmethod
    def cosine(a: Sequence[float], b: Sequence[float]) -> float:
        dot = sum(map(mul, a, b))
        na = math.sqrt(sum(map(mul, a, a)))
        nb = math.sqrt(sum(map(mul, b, b)))
        return dot / (na * nb) if na and nb else 0.0

    def calibrate(self, cosine: float) -> float:
        span = self.high - self.low
        return min(1.0, max(0.0, (cosine - self.low) / span)) if span > 0 else 0.0


@dataclass
class EmbeddingScorer:
    """Best cosine similarity between the memory and a 3-sentence window of the response."""

    model: StaticEmbedding
    window_sentences: int = 3
    threshold: float = field(init=False)

    def __post_init__(self) -> None:
        self.threshold = self.model.threshold

    def _windows(self, response: str) -> list[list[float]]:
        return [vec for vec, _ in self._window_texts(response)]

    def _window_texts(self, response: str) -> list[tuple[list[float], str]]:
        """Unit vectors of the response's windows of `window_sentences` sentences, with their
        text (windows with no known word are left out). The user's question restated in the
        response is dropped first, as the lexical scorer does (labelling guide U5). Each
        sentence is summed once; a window adds its sentences' sums, which has the same
        direction as the mean of its words."""
        text = without_quoted_question(response)
        sentences = [s for s in _SENTENCE_RE.split(text) if s.strip(" \t\n.")] or [text]
        sums = [self.model.embed_sum(s) for s in sentences]
        span = min(self.window_sentences, len(sentences))
        out = []
        for i in range(len(sentences) - span + 1):
            part = sums[i : i + span]
            if not any(known for _, known in part):
                continue
            vec = [sum(col) for col in zip(*(v for v, _ in part), strict=True)]
            norm = math.sqrt(sum(map(mul, vec, vec)))
            if norm:
                out.append(([x / norm for x in vec], " ".join(sentences[i : i + span])))
        return out

    def best(self, contents: Sequence[str], response: str) -> list[tuple[float | None, str]]:
        """Per content: the best window's cosine and that window's text (None, "" when the
        memory or the response has no known word)."""
        windows = self._window_texts(response)
        results: list[tuple[float | None, str]] = []
        for content in contents:
            mem = self.model.embed(content)
            norm = math.sqrt(sum(map(mul, mem, mem))) if mem is not None else 0.0
            if not norm or not windows:
                results.append((None, ""))
                continue
            unit = [x / norm for x in mem]
            cosines = [sum(map(mul, unit, w)) for w, _ in windows]  # windows are unit vectors
            at = max(range(len(cosines)), key=cosines.__getitem__)
            results.append((cosines[at], windows[at][1]))
        return results

    def score(self, content: str, response: str) -> tuple[float, str]:
        return self.score_many([content], response)[0]

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]:
        return [self._verdict(cos) for cos, _ in self.best(contents, response)]

    def _verdict(self, cos: float | None) -> tuple[float, str]:
        if cos is None:
            return 0.0, "embedding: no known words"
        score = self.model.calibrate(cos)
        return score, f"embedding cosine {cos:.2f} -> {score:.2f}"


@dataclass
class CombinedScorer:
    """max(lexical, embedding), except that a lexical veto (contradiction, another entity,
    different numbers) keeps the lexical score. Both scores are on the lexical threshold's
    scale: the embedding score is rescaled so its own threshold maps onto the lexical one."""

    embedding: EmbeddingScorer
    lexical: LexicalScorer = DEFAULT_SCORER
    threshold: float = field(init=False)

    def __post_init__(self) -> None:
        self.threshold = self.lexical.threshold

    def score(self, content: str, response: str) -> tuple[float, str]:
        return self.score_many([content], response)[0]

    def score_many(self, contents: Sequence[str], response: str) -> list[tuple[float, str]]:
        lexical = self.lexical.score_many(contents, response)
        embedded = self.embedding.best(contents, response)
        ratio = self.threshold / self.embedding.threshold if self.embedding.threshold else 1.0
        out = []
        for content, (lex, lex_reason), (cos, window) in zip(
            contents, lexical, embedded, strict=True
        ):
            emb, emb_reason = self.embedding._verdict(cos)
            scaled = min(1.0, emb * ratio)
            if scaled <= lex or any(v in lex_reason for v in _VETO):
                out.append((lex, lex_reason))
                continue
            # An embedding cannot see negation: "no longer lives in Berlin" is close to "lives
            # in Berlin". A passage with a negation or "no longer true" cue that the memory
            # does not have is not taken as a use on the embedding's word alone.
            cues = retraction_cues(window) - retraction_cues(content)
            if cues and scaled >= self.threshold:
                cue = sorted(cues)[0]
                out.append(
                    (
                        lex,
                        f"{lex_reason}; {emb_reason} not taken: the closest passage says "
                        f"'{cue}' where the memory does not, so it may contradict the memory",
                    )
                )
            else:
                out.append((scaled, f"{emb_reason} (over {lex_reason})"))
        return out


def configured_scorer(environ: dict[str, str] | None = None) -> Scorer:
    """The combined scorer when RMS_EMBEDDING_MODEL names a model directory; else the scorer
    RMS_DETECTION_SCORER names: ``fitted`` (the default since round 4, held-out
    precision 0.890 against the lexical scorer's 0.712: docs/DETECTION.md) or ``lexical``. A
    configured directory that is not a valid model, or an unknown scorer name, raises
    EmbeddingModelError: a misconfiguration should be seen, not silently ignored."""
    environ = os.environ if environ is None else environ
    path = environ.get(ENV_VAR, "").strip()
    if path:
        return CombinedScorer(EmbeddingScorer(StaticEmbedding.load(path)))
    name = environ.get(SCORER_VAR, "").strip() or DEFAULT_SCORER_NAME
    if name == "fitted":
        from analysis.model import FittedScorer

        return FittedScorer()
    if name != "lexical":
        raise EmbeddingModelError(f"{SCORER_VAR}={name!r}: expected 'lexical' or 'fitted'")
    return DEFAULT_SCORER


@lru_cache(maxsize=1)
def service_scorer() -> Scorer:
    """The scorer the service uses (read once per process). A configured but unusable model
    directory or scorer name is logged and the default scorer used instead: detection degrades,
    it never fails a request."""
    try:
        return configured_scorer()
    except EmbeddingModelError as exc:
        logger.warning(
            "detection scorer not usable, using the default (%s): %s", DEFAULT_SCORER_NAME, exc
        )
        return configured_scorer({})
