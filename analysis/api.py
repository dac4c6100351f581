"""The response analysis as the rest of the service calls it: ``analyse`` a response against the
injected objects, the scorer the service uses, the bounds of one analysis, and ``warm`` for
process start. Callers (ingestion, POST /detect, the serializers, process start-up) import this
module only; the stages behind it (text, tokens, prepared texts, scorers) can change freely.

Pure module: stdlib only, no Django import, deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from analysis.concepts import related_table
from analysis.embedding import service_scorer
from analysis.lexical import DEFAULT_SCORER
from analysis.prepare import _prepare_memory
from analysis.tokens import _frequencies, _lex, _negate
from analysis.types import (
    REFERENCED,
    UNUSED,
    BatchScorer,
    Detection,
    DetectionInput,
    Scorer,
    SignalType,
)
from analysis.words import stem_of

__all__ = [
    "DEFAULT_SCORER",
    "MAX_OBJECTS",
    "MAX_RESPONSE_CHARS",
    "REFERENCED",
    "UNUSED",
    "BatchScorer",
    "Detection",
    "DetectionInput",
    "Scorer",
    "SignalType",
    "analyse",
    "clear_caches",
    "service_scorer",
    "warm",
]


def warm() -> None:
    """Load what the first analysis would otherwise load on the request path: the word
    frequencies and the WordNet table (about 0.8 s together). Web and worker processes call
    this as they start (``rms.gunicorn_conf``, the worker); results never depend on it."""
    _frequencies()
    related_table()


def clear_caches() -> None:
    """Empty the word caches (for cold-start timing; results never depend on them)."""
    stem_of.cache_clear()
    _lex.cache_clear()
    _negate.cache_clear()
    _prepare_memory.cache_clear()


#: The bounds of one analysis, on the API (a session with ``detect``, POST /detect). Its cost grows
#: with the response's length times the objects scored: at the bounds about a second of CPU
#: (bench/bench_detect_feed.py). 32,000 characters is about 8,000 tokens, a long LLM answer;
#: 200 objects is a large memory bundle and the /detect endpoint's earlier list bound.
MAX_RESPONSE_CHARS = 32_000
MAX_OBJECTS = 200


def analyse(
    response_text: str,
    objects: Sequence[DetectionInput],
    scorer: Scorer | None = None,
    threshold: float | None = None,
) -> list[Detection]:
    """One Detection per object, in the given order: REFERENCED when score >= threshold.

    `threshold` overrides the scorer's own. Scores are clamped to [0, 1].
    """
    if not objects:
        return []
    scorer = scorer or DEFAULT_SCORER
    cut = scorer.threshold if threshold is None else threshold
    contents = [o.content for o in objects]
    if isinstance(scorer, BatchScorer):
        results = scorer.score_many(contents, response_text)
    else:
        results = [scorer.score(c, response_text) for c in contents]
    detections = []
    for obj, (raw, reason) in zip(objects, results, strict=True):
        score = min(1.0, max(0.0, float(raw)))
        signal: SignalType = REFERENCED if score >= cut else UNUSED
        detections.append(Detection(obj.object_id, signal, round(score, 4), reason))
    return detections
