"""The retrieval bench's simulated clock and planted similarities (bench/bench_retrieval.py).

The bench replays the in-process precision simulation through the real stack, so its query
similarities must be the simulation's exactly (through LangChain's real ``InMemoryVectorStore``)
and its days must all be times the server accepts (none in the future).
"""

import importlib.util
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_bench():
    path = ROOT / "bench" / "bench_retrieval.py"
    spec = importlib.util.spec_from_file_location("bench_retrieval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", [0, 1, 100])
def test_the_vector_stores_cosine_is_the_simulations_similarity(seed):
    from langchain_core.vectorstores import InMemoryVectorStore

    bench = load_bench()
    rng = random.Random(seed)
    items = bench.corpus(rng)
    texts = [text for _, text, _, _ in items]
    embedding = bench.PlantedEmbedding(texts)
    store = InMemoryVectorStore(embedding)
    ids = [f"id-{j}" for j in range(len(texts))]
    for n in range(1, 6):
        targets = bench.session_similarities(items, rng)
        embedding.plant(dict(zip(texts, targets, strict=True)))
        store.add_texts(texts, ids=ids)  # the session's vectors replace the last ones
        hits = store.similarity_search_with_score(f"q:{n}", k=len(items) + 5)
        got = {doc.page_content: score for doc, score in hits}
        want = dict(zip(texts, targets, strict=True))
        assert got.keys() == want.keys() and len(hits) == len(items)
        assert max(abs(got[t] - want[t]) for t in want) < 1e-12
        # the noise moved the similarities away from the corpus's base ones
        assert max(abs(t - s) for t, (_, _, _, s) in zip(targets, items, strict=True)) > 1e-3


def test_the_simulated_days_end_before_the_wall_clock():
    bench = load_bench()
    wall = datetime(2026, 12, 6, 7, 30, 15, 123456, tzinfo=UTC)
    origin = bench.simulated_origin(50, wall)
    assert origin == datetime(2026, 10, 16, 7, 30, 15, tzinfo=UTC)
    last = origin + 50 * bench.DAY
    assert last == wall.replace(microsecond=0) - timedelta(days=1)
    assert bench.simulated_origin(50).tzinfo is not None


def test_memories_map_to_the_simulations_ids():
    bench = load_bench()
    assert bench.sim_id("relevant memory 3") == "relevant-03"
    assert bench.sim_id("filler memory 27") == "filler-27"
