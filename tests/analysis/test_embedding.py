"""Optional embedding scorer (analysis/embedding.py): the documented on-disk format, loaded from a
tiny model built here; the combination with the lexical scorer and its vetoes; configuration by
RMS_EMBEDDING_MODEL (never a download: an absent variable means the lexical scorer)."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest

from analysis import embedding
from analysis.api import DEFAULT_SCORER, REFERENCED, UNUSED, DetectionInput, analyse
from analysis.embedding import (
    FORMAT,
    CombinedScorer,
    EmbeddingModelError,
    EmbeddingScorer,
    StaticEmbedding,
    configured_scorer,
)

# Four directions: transport, food, music, filler. Synonyms share a direction.
WORDS = {
    "car": (1, 0, 0, 0),
    "vehicle": (1, 0, 0, 0),
    "automobile": (0.9, 0.1, 0, 0),
    "drive": (0.8, 0, 0, 0.2),
    "vegetarian": (0, 1, 0, 0),
    "meat": (0, 0.9, 0, 0.1),
    "lentil": (0, 0.8, 0, 0.2),
    "jazz": (0, 0, 1, 0),
    "playlist": (0, 0, 0.9, 0.1),
    "user": (0, 0, 0, 1),
    "the": (0, 0, 0, 1),
}


def build_model(directory: Path, **config) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    vocab = list(WORDS)
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    floats = array("f", [x for w in vocab for x in WORDS[w]])
    (directory / "vectors.f32").write_bytes(floats.tobytes())
    cfg = {"format": FORMAT, "dim": 4, "threshold": 0.5, "low": 0.5, "high": 1.0, **config}
    (directory / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return directory


def test_tiny_model_loads_and_embeds(tmp_path):
    model = StaticEmbedding.load(build_model(tmp_path / "m"))
    assert model.dim == 4 and len(model.index) == len(WORDS)
    assert model.embed("The CAR!") == pytest.approx([0.5, 0.0, 0.0, 0.5])
    assert model.embed("nothing known here") is None
    assert model.cosine([1, 0], [1, 0]) == pytest.approx(1.0)
    assert model.calibrate(0.75) == pytest.approx(0.5)
    assert model.calibrate(0.1) == 0.0 and model.calibrate(1.2) == 1.0


def test_embedding_scorer_finds_a_paraphrase_the_words_do_not_share(tmp_path):
    scorer = EmbeddingScorer(StaticEmbedding.load(build_model(tmp_path / "m")))
    (near, _), (far, reason) = scorer.score_many(
        ["User's car", "User likes jazz"], "Your vehicle needs new tyres."
    )
    assert near == pytest.approx(1.0)
    assert far == 0.0 and reason.startswith("embedding cosine")


def test_combined_scorer_raises_recall_but_keeps_the_lexical_vetoes(tmp_path):
    combined = CombinedScorer(EmbeddingScorer(StaticEmbedding.load(build_model(tmp_path / "m"))))
    assert combined.threshold == DEFAULT_SCORER.threshold
    memory = DetectionInput("a", "User is vegetarian.")
    # Lexically nothing is shared (the lexicon would read "without meat" as "vegetarian"); the
    # embedding sees the same topic.
    (lexical,) = analyse("Here is a lentil dish with spinach.", [memory])
    (det,) = analyse("Here is a lentil dish with spinach.", [memory], combined)
    assert lexical.signal_type == UNUSED
    assert det.signal_type == REFERENCED and "embedding" in det.reason
    # A contradiction found by the lexical checks stays UNUSED whatever the embedding says.
    (veto,) = analyse("You are not vegetarian anymore.", [memory], combined)
    assert veto.signal_type == UNUSED and "contradicts" in veto.reason


def test_configuration_by_environment(tmp_path):
    # The fitted combination is the service's default (round 4's switch rule, docs/DETECTION.md).
    assert type(configured_scorer({})).__name__ == "FittedScorer"
    assert type(configured_scorer({"RMS_EMBEDDING_MODEL": "  "})).__name__ == "FittedScorer"
    assert type(configured_scorer({"RMS_DETECTION_SCORER": " "})).__name__ == "FittedScorer"
    assert configured_scorer({"RMS_DETECTION_SCORER": "lexical"}) is DEFAULT_SCORER
    fitted = configured_scorer({"RMS_DETECTION_SCORER": "fitted"})
    assert type(fitted).__name__ == "FittedScorer"
    with pytest.raises(EmbeddingModelError):
        configured_scorer({"RMS_DETECTION_SCORER": "bert"})
    path = build_model(tmp_path / "m")
    scorer = configured_scorer({"RMS_EMBEDDING_MODEL": str(path)})
    assert isinstance(scorer, CombinedScorer)
    with pytest.raises(EmbeddingModelError, match="not a readable"):
        configured_scorer({"RMS_EMBEDDING_MODEL": str(tmp_path / "absent")})


def test_malformed_models_are_rejected(tmp_path):
    wrong_format = build_model(tmp_path / "f", format="something-else")
    with pytest.raises(EmbeddingModelError, match="format"):
        StaticEmbedding.load(wrong_format)
    short = build_model(tmp_path / "s", dim=5)
    with pytest.raises(EmbeddingModelError, match="floats"):
        StaticEmbedding.load(short)


def test_service_falls_back_to_the_default_on_a_bad_model(tmp_path, monkeypatch, caplog):
    embedding.service_scorer.cache_clear()
    monkeypatch.setenv("RMS_EMBEDDING_MODEL", str(tmp_path / "absent"))
    try:
        assert type(embedding.service_scorer()).__name__ == "FittedScorer"
        assert "not usable" in caplog.text
        embedding.service_scorer.cache_clear()
        monkeypatch.delenv("RMS_EMBEDDING_MODEL")
        monkeypatch.setenv("RMS_DETECTION_SCORER", "bert")
        assert type(embedding.service_scorer()).__name__ == "FittedScorer"
        embedding.service_scorer.cache_clear()
        monkeypatch.setenv("RMS_DETECTION_SCORER", "lexical")
        assert embedding.service_scorer() is DEFAULT_SCORER
        monkeypatch.delenv("RMS_DETECTION_SCORER")
        embedding.service_scorer.cache_clear()
        monkeypatch.setenv("RMS_EMBEDDING_MODEL", str(build_model(tmp_path / "m")))
        assert isinstance(embedding.service_scorer(), CombinedScorer)
    finally:
        embedding.service_scorer.cache_clear()
