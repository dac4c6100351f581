"""The embedding scorer's fast path (analysis/embedding.py): each sentence is summed once and a
window adds its sentences' sums. It must give the same best-window cosine as the plain
definition (mean of each window's known words, cosine with the memory's mean), on a tiny model
built here in the documented rms-static-embedding/1 format."""

from __future__ import annotations

import json
import math
from array import array

import pytest

from analysis.embedding import _SENTENCE_RE, FORMAT, EmbeddingScorer, StaticEmbedding

VECTORS = {
    "car": (1.0, 0.0, 0.0),
    "vehicle": (0.9, 0.1, 0.0),
    "jazz": (0.0, 1.0, 0.0),
    "playlist": (0.1, 0.8, 0.1),
    "lentil": (0.0, 0.1, 1.0),
    "soup": (0.2, 0.0, 0.7),
}


def _model(tmp_path) -> StaticEmbedding:
    vocab = list(VECTORS)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    floats = array("f", [x for w in vocab for x in VECTORS[w]])
    (tmp_path / "vectors.f32").write_bytes(floats.tobytes())
    config = {"format": FORMAT, "dim": 3, "threshold": 0.5, "low": 0.0, "high": 1.0}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return StaticEmbedding.load(tmp_path)


def _naive_best_cosine(model: StaticEmbedding, memory: str, response: str, span: int) -> float:
    sentences = [s for s in _SENTENCE_RE.split(response) if s.strip()]
    span = min(span, len(sentences))
    mem = model.embed(memory)
    best = -1.0
    for i in range(len(sentences) - span + 1):
        win = model.embed(" ".join(sentences[i : i + span]))
        if win is not None:
            best = max(best, model.cosine(mem, win))
    return best


@pytest.mark.parametrize("span", [1, 2, 3])
def test_windows_from_sentence_sums_match_the_plain_definition(tmp_path, span):
    model = _model(tmp_path)
    scorer = EmbeddingScorer(model, window_sentences=span)
    response = (
        "Nothing here is known. The car is a vehicle! Put on a jazz playlist. "
        "Unknown words only? Lentil soup tonight. Then the car again."
    )
    for memory in ("car vehicle", "jazz", "lentil soup", "car jazz soup"):
        expected = _naive_best_cosine(model, memory, response, span)
        (score, reason) = scorer.score(memory, response)
        got = float(reason.split()[2])  # "embedding cosine C -> S"
        assert got == pytest.approx(round(expected, 2), abs=0.005)
        assert score == pytest.approx(min(1.0, max(0.0, expected)), abs=1e-9)


def test_embed_sum_is_the_mean_times_the_count(tmp_path):
    model = _model(tmp_path)
    total, known = model.embed_sum("Car, JAZZ and an unknown word; car.")
    assert known == 3
    assert total == pytest.approx([2.0, 1.0, 0.0])
    assert model.embed("Car, JAZZ and an unknown word; car.") == pytest.approx([2 / 3, 1 / 3, 0.0])
    assert model.embed_sum("nothing known") == ([0.0, 0.0, 0.0], 0)


def test_no_known_word_in_the_response_scores_zero(tmp_path):
    scorer = EmbeddingScorer(_model(tmp_path))
    assert scorer.score("car", "Nothing known. At all.") == (0.0, "embedding: no known words")
    # a cosine of exactly 1 for the same words, whatever their count
    score, reason = scorer.score("car", "car car car.")
    assert math.isclose(score, 1.0) and reason == "embedding cosine 1.00 -> 1.00"


def test_retraction_cues_are_the_no_longer_true_words_not_plain_negation():
    from analysis.text import retraction_cues

    text = "You don't live in Berlin anymore; you used to. Jenkins was retired, no longer used."
    assert retraction_cues(text) == {"anymore", "used to", "retired", "no longer"}
    assert retraction_cues("Formerly at ACME; she quit and stopped.") == {
        "formerly",
        "quit",
        "stopped",
    }
    # Plain negation is how rules are applied as often as how memories are denied.
    assert retraction_cues("A lentil dish without meat, not fried, no dairy, never spicy.") == set()


def test_combined_scorer_does_not_lift_a_no_longer_true_passage(tmp_path):
    from analysis.api import DEFAULT_SCORER, DetectionInput, analyse
    from analysis.embedding import CombinedScorer

    combined = CombinedScorer(EmbeddingScorer(_model(tmp_path)))
    memory = DetectionInput("m", "Likes lentil soup.")
    # The embedding alone is sure (same words); the lexical scorer is not asked to decide here
    # because its threshold is raised out of reach for this test.
    strict = CombinedScorer(EmbeddingScorer(_model(tmp_path)), type(DEFAULT_SCORER)(threshold=0.99))
    (used,) = analyse("Lentil soup tonight, as usual.", [memory], strict)
    assert used.signal_type == "REFERENCED" and used.reason.startswith("embedding cosine")
    (over,) = analyse("Lentil soup is no longer on your list.", [memory], strict)
    assert over.signal_type == "UNUSED"
    assert "may contradict the memory" in over.reason and "'no longer'" in over.reason
    # The memory's own cue is not held against the response ("used to" in both).
    past = DetectionInput("p", "Used to like lentil soup.")
    (agree,) = analyse("You used to like lentil soup.", [past], strict)
    assert agree.signal_type == "REFERENCED"
    assert combined.threshold == DEFAULT_SCORER.threshold


def test_the_quoted_user_question_is_dropped_before_embedding(tmp_path):
    scorer = EmbeddingScorer(_model(tmp_path))
    # Only the restated question shares the memory's words: nothing is left to match.
    score, reason = scorer.score("jazz playlist", 'You asked: "Any jazz playlist?" Car soup.')
    assert reason.startswith("embedding cosine") and score < 0.2
    score, _ = scorer.score("jazz playlist", "Any jazz playlist? Car soup.")
    assert score > 0.6
