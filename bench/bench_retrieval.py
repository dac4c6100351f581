"""Retrieval getting better session by session, through the real stack.

    .venv/bin/python bench/bench_retrieval.py [--seeds 0 1 2] [--sessions 50]

RFC-0009 §11's systematic-extraction case, as the in-process precision simulation plants it
(``feedback.simulations.precision``, same parameters and seeds): 8 relevant memories (similarity
0.50-0.70, mixed types), 4 wrong ones that look like the user's questions (similarity 0.85-0.95,
extracted as OBSERVED) and 28 fillers (0.05-0.40). Each session the query's similarity to each
memory moves by ±0.03.

The stack: PostgreSQL behind gunicorn (``bench/common.py``), the objects created through the
API, a LangChain ``InMemoryVectorStore`` over a planted embedding (a real ``Embeddings``: each
memory's vector is ``s·e0 + sqrt(1-s²)·e_j``, the session's query ``e0 + Σ δ_j e_j``, so the
store's cosine is the planted similarity plus the session's noise), wrapped by ``RMSRetriever``
(k=5, fetch_k=20) ranking through the client's score mirror when this client has one
(``client.mirror``), else through ``POST /rank`` (said in the output). The simulated user
CONFIRMs each relevant memory shown with p=0.85 and CORRECTs each wrong one with p=0.9; the
session (injections in the retriever's order, the signals, the outcome) goes through the real
recorder. p@5 is measured on what the session showed, before its own feedback; MRR is 1 / the
rank of the first memory the user used (0 when none).

Arms, each a fresh namespace: ``similarity`` (the vector store's own top 5, no RMS), ``spec12``
(weights 0.45/0.30/0.25, SPEC §12), ``default`` (the new-namespace default profile).
Sessions run at the wall clock (seconds apart, not the simulation's days): decay and hotness
halving barely move here, which the in-process simulation's daily sessions do.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import common  # noqa: E402
from langchain_core.embeddings import Embeddings  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from rms_client import RMSClient  # noqa: E402
from rms_client.integrations.langchain import RMSRetriever  # noqa: E402

from feedback.simulations.common import CORPUS_TYPES, session_outcome  # noqa: E402
from feedback.simulations.precision import precision_simulation  # noqa: E402

DB = "rms_bench_retrieval"
K, FETCH_K = 5, 20
CHECKPOINTS = (1, 10, 25, 50)
ARMS = {
    "similarity": None,
    "spec12": {"similarity": 0.45, "hotness": 0.30, "utility": 0.25},
    "default": {},
}
RELEVANT, WRONG, FILLER = "relevant", "wrong", "filler"


class PlantedEmbedding(Embeddings):
    """Memory texts map to fixed unit vectors with a planted cosine to the base query; a query
    text ``q:<session>`` maps to the base query plus that session's noise."""

    def __init__(self, sims: dict[str, float], noise: dict[str, list[float]]) -> None:
        self.texts = list(sims)
        self.sims, self.noise = sims, noise
        self.dim = 1 + len(self.texts)

    def _memory(self, text: str) -> list[float]:
        j, s = self.texts.index(text), self.sims[text]
        v = [0.0] * self.dim
        v[0], v[1 + j] = s, math.sqrt(max(0.0, 1 - s * s))
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._memory(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        v[0] = 1.0
        for j, (t, n) in enumerate(zip(self.texts, self.noise[text], strict=True)):
            r = math.sqrt(max(1e-9, 1 - self.sims[t] ** 2))
            v[1 + j] = n / r  # cos ≈ s + n (before the query's own normalisation)
        return v


class ServerRanker:
    """``rank``/``get`` answered by ``POST /rank`` (used when the client has no mirror)."""

    def __init__(self, client: RMSClient, namespace: str, ids: set[str]) -> None:
        self.client, self.namespace, self.ids = client, namespace, ids

    def get(self, object_id):
        return {} if object_id in self.ids else None

    def rank(self, candidates, now=None):
        return self.client.rank(self.namespace, candidates)


def corpus(rng: random.Random) -> list[tuple[str, str, str, float]]:
    """(label, text, epistemic type, similarity), drawn as the in-process simulation draws."""
    out = []
    for j in range(8):
        t = rng.choice(("OBSERVED", "ASSERTED", "INFERRED"))
        out.append((RELEVANT, f"relevant memory {j}", t, 0.50 + 0.20 * rng.random()))
    for j in range(4):
        out.append((WRONG, f"wrong memory {j}", "OBSERVED", 0.85 + 0.10 * rng.random()))
    for j in range(28):
        t = rng.choice(CORPUS_TYPES[:4])
        out.append((FILLER, f"filler memory {j}", t, 0.05 + 0.35 * rng.random()))
    return out


def run_arm(url: str, token: str, arm: str, seed: int, sessions: int) -> list[dict]:
    rng = random.Random(seed)
    items = corpus(rng)
    ns = f"ret_{arm}_{seed}"
    with RMSClient(url, token, timeout=30) as client:
        weights = ARMS[arm]
        client.create_namespace(ns, **({"weights": weights} if weights else {}))
        created = client.create_objects(
            [{"namespace": ns, "content": text, "epistemic_type": t} for _, text, t, _ in items]
        )
        ids = [c["id"] for c in created]
        label = {oid: item[0] for oid, item in zip(ids, items, strict=True)}
        sims = {text: s for _, text, _, s in items}
        noise = {
            f"q:{n}": [0.06 * (rng.random() - 0.5) for _ in items] for n in range(1, sessions + 1)
        }
        store = InMemoryVectorStore(PlantedEmbedding(sims, noise))
        store.add_texts([text for _, text, _, _ in items],
                        metadatas=[{"rms_object_id": oid} for oid in ids])  # fmt: skip
        mirror_factory = getattr(client, "mirror", None)
        mirror = mirror_factory(ns) if mirror_factory else ServerRanker(client, ns, set(ids))
        if hasattr(mirror, "wait_until_current"):
            mirror.wait_until_current(timeout=30)
        base = store.as_retriever(search_kwargs={"k": K if arm == "similarity" else FETCH_K})
        retriever = base if arm == "similarity" else RMSRetriever(
            base_retriever=base, mirror=mirror, k=K, fetch_k=FETCH_K)  # fmt: skip
        series = []
        with client.recorder(flush_at=1, flush_interval=0.05) as rec:
            for n in range(1, sessions + 1):
                docs = retriever.invoke(f"q:{n}")[:K]
                shown = [d.metadata["rms_object_id"] for d in docs]
                it = rec.interaction(ns, context_budget=4000, session_id=f"{ns}-{n}")
                helped = hurt = 0
                first_used = None
                for oid, doc in zip(shown, docs, strict=True):
                    it.injected(oid, token_cost=max(1, len(doc.page_content) // 4),
                                composite_score=doc.metadata.get("rms_score"))  # fmt: skip
                for rank, oid in enumerate(shown, start=1):
                    kind = label[oid]
                    if kind == RELEVANT and rng.random() < 0.85:
                        it.signal(oid, "CONFIRMED", actor_id="user-1", actor_type="HUMAN_USER",
                                  detection_method="explicit_user")  # fmt: skip
                        helped += 1
                        first_used = first_used or rank
                    elif kind == WRONG and rng.random() < 0.9:
                        it.signal(oid, "CORRECTED", actor_id="user-1", actor_type="HUMAN_USER",
                                  detection_method="explicit_user")  # fmt: skip
                        hurt += 1
                it.outcome(session_outcome(helped, hurt, rng))
                it.record()
                if not rec.flush(timeout=60):
                    raise RuntimeError("the recorder did not flush")
                if hasattr(mirror, "wait_until_current"):
                    mirror.wait_until_current(timeout=30)
                series.append(
                    {
                        "session": n,
                        "p5": sum(label[o] == RELEVANT for o in shown) / K,
                        "mrr": 1.0 / first_used if first_used else 0.0,
                    }
                )
            if rec.stats["failed"]:
                raise RuntimeError(f"the recorder failed: {rec.stats}")
        if hasattr(mirror, "close"):
            mirror.close()
        print(f"# {arm:10s} seed {seed}: ranked by "
              f"{'mirror' if mirror_factory else '/rank'}; p@5 "
              + " ".join(f"s{c}={series[c - 1]['p5']:.2f}" for c in CHECKPOINTS if c <= sessions),
              flush=True)  # fmt: skip
        return series


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {sd:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sessions", type=int, default=50)
    args = parser.parse_args()
    common.stop_on_sigterm()
    common.setup_database(DB)
    results: dict[str, list[list[dict]]] = {arm: [] for arm in ARMS}
    t0 = time.perf_counter()
    try:
        token = common.create_api_client("bench-admin", role="admin", namespaces=(), db=DB)
        with common.Server(db=DB, workers=1, threads=4) as server:
            for seed in args.seeds:
                for arm in ARMS:
                    results[arm].append(run_arm(server.base, token, arm, seed, args.sessions))
    finally:
        common.drop_database(DB)
    checkpoints = [c for c in CHECKPOINTS if c <= args.sessions]
    rows = []
    for arm, runs in results.items():
        for metric in ("p5", "mrr"):
            rows.append(
                [arm, "p@5" if metric == "p5" else "MRR"]
                + [spread([r[c - 1][metric] for r in runs]) for c in checkpoints]
            )
    inproc = [precision_simulation(seed, sessions=args.sessions) for seed in args.seeds]
    rows.append(
        ["in-process sim", "p@5"]
        + [spread([s["series"][c - 1]["precision_at_5"] for s in inproc]) for c in checkpoints]
    )
    print(f"# seeds {args.seeds}, {args.sessions} sessions, {time.perf_counter() - t0:.0f} s")
    common.print_table(["arm", "metric", *[f"session {c}" for c in checkpoints]], rows)
    if args.sessions >= 50:

        def gain(runs, key):
            return statistics.fmean(r[49][key] - r[0][key] for r in runs)

        default_gain = gain(results["default"], "p5")
        sim_gain = statistics.fmean(
            s["series"][49]["precision_at_5"] - s["series"][0]["precision_at_5"] for s in inproc
        )
        over = statistics.fmean(
            d[49]["p5"] - s[49]["p5"]
            for d, s in zip(results["default"], results["similarity"], strict=True)
        )
        print(f"# default profile: p@5 gain session 1 -> 50 {default_gain:+.2f} "
              f"(in-process simulation {sim_gain:+.2f}); over similarity-only at session 50 "
              f"{over:+.2f} (target >= +0.25)")  # fmt: skip


if __name__ == "__main__":
    main()
