"""Retrieval getting better session by session, through the real stack.

    .venv/bin/python bench/bench_retrieval.py [--seeds 0 1 2] [--sessions 50] [--db rms_bench_…]

RFC-0009 §11's systematic-extraction case, as the in-process precision simulation plants it
(``feedback.simulations.precision``, same parameters and seeds): 8 relevant memories (similarity
0.50-0.70, mixed types), 4 wrong ones that look like the user's questions (similarity 0.85-0.95,
extracted as OBSERVED) and 28 fillers (0.05-0.40). Each session the query's similarity to each
memory moves by ±0.03, drawn from the seed's stream in the simulation's order, so an arm's draws
(corpus, noise, the user's choices, the outcome) are the simulation's as long as it is shown the
same memories.

The stack: PostgreSQL behind gunicorn (``bench/common.py``), the objects created through the
API, a LangChain ``InMemoryVectorStore`` over a planted embedding (a real ``Embeddings``: the
query is ``e0`` and each memory's vector ``t·e0 + sqrt(1-t²)·e_j``, re-embedded each session with
``t`` the simulation's similarity of that session, so the store's cosine is exactly it), wrapped
by ``RMSRetriever`` (k=5, fetch_k=20) ranking through the client's score mirror when this client
has one (``client.mirror``), else through ``POST /rank`` (said in the output); each session also
asks ``POST /rank`` for the same candidates at the same clock and checks the mirror's scores
equal it to 1e-12. The simulated user CONFIRMs each relevant memory shown with p=0.85 and
CORRECTs each wrong one with p=0.9; the session (injections in the retriever's order, the
signals, the outcome) goes through the real recorder. p@5 is measured on what the session
showed, before its own feedback; MRR is 1 / the rank of the first memory the user used (0 when
none).

Arms, each a fresh namespace: ``similarity`` (the vector store's own top 5, no RMS), ``spec12``
(weights 0.45/0.30/0.25, SPEC §12), ``default`` (the new-namespace default profile).

The clock is simulated, as the in-process simulation's: the memories are formed at an origin
(``ts`` of ``POST /objects``) and session n happens n days later (the session's ``ts``, which
its injections, signals and uses take; the ``now`` the retriever ranks at, ``RMSRetriever``'s
``clock``). The server refuses a ``ts`` in the future and one earlier than an object's latest
operation, so the origin is ``sessions + 1`` days before the wall clock and the days only move
forward. Decay and hotness therefore act as in the simulation: a memory not used for a week has
half its hotness. The default arm is then checked session by session against
``precision_simulation`` of the same seed: the same five memories shown at every session means
the server, the feed, the mirror and the retriever rank exactly as the simulation does.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
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
DAY = timedelta(days=1)
#: The mirror must score as ``/rank`` does (DECISIONS "Score mirror").
MIRROR_TOLERANCE = 1e-12
CHECKPOINTS = (1, 10, 25, 50)
ARMS = {
    "similarity": None,
    "spec12": {"similarity": 0.45, "hotness": 0.30, "utility": 0.25},
    "default": {},
}
RELEVANT, WRONG, FILLER = "relevant", "wrong", "filler"


def simulated_origin(sessions: int, wall: datetime | None = None) -> datetime:
    """When the memories are formed: session n is n days later, and the last one a day before
    the wall clock (the server refuses a ``ts`` in the future)."""
    wall = wall if wall is not None else datetime.now(UTC)
    return wall.replace(microsecond=0) - (sessions + 1) * DAY


class PlantedEmbedding(Embeddings):
    """Every query maps to ``e0``; memory j maps to ``t_j·e0 + sqrt(1 - t_j²)·e_{1+j}``, where
    ``t_j`` is its similarity planted for the current session (``plant``), so the store's cosine
    is exactly that similarity. The memories are re-embedded each session (same texts, same ids:
    the store's upsert): the simulation's independent ±0.03 moves of 40 similarities cannot be
    given by moving only the query against fixed memory vectors (docs/DECISIONS.md)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.dim = 1 + len(self.texts)
        self.sims: dict[str, float] = {}

    def plant(self, sims: dict[str, float]) -> None:
        self.sims = dict(sims)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for text in texts:
            j, t = self.texts.index(text), self.sims[text]
            v = [0.0] * self.dim
            v[0], v[1 + j] = t, math.sqrt(max(0.0, 1 - t * t))
            out.append(v)
        return out

    def embed_query(self, text: str) -> list[float]:
        return [1.0] + [0.0] * len(self.texts)


class ServerRanker:
    """``rank``/``get`` answered by ``POST /rank`` (used when the client has no mirror)."""

    def __init__(self, client: RMSClient, namespace: str, ids: set[str]) -> None:
        self.client, self.namespace, self.ids = client, namespace, ids

    def get(self, object_id):
        return {} if object_id in self.ids else None

    def rank(self, candidates, now=None):
        return self.client.rank(self.namespace, candidates, now=now)


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


def sim_id(text: str) -> str:
    """The in-process simulation's id of a memory: ``relevant memory 3`` is ``relevant-03``."""
    label, _, j = text.split()
    return f"{label}-{int(j):02d}"


def session_similarities(items, rng: random.Random) -> list[float]:
    """A session's similarity of each memory, in corpus order, as the simulation draws it."""
    return [min(1.0, max(0.0, s + 0.06 * (rng.random() - 0.5))) for _, _, _, s in items]


def mirror_vs_rank(mirror, client: RMSClient, ns: str, pairs, now: datetime) -> float:
    """The largest score difference between the mirror and ``POST /rank`` for the same
    candidates at the same clock; an order or eligibility that differs is an error."""
    ours, theirs = mirror.rank(pairs, now=now), client.rank(ns, pairs, now=now)
    if [(str(r["object_id"]), r["eligible"]) for r in ours] != [
        (str(r["object_id"]), r["eligible"]) for r in theirs
    ]:
        raise RuntimeError(f"the mirror orders {ns} differently from /rank at {now.isoformat()}")
    return max((abs(a["score"] - b["score"]) for a, b in zip(ours, theirs, strict=True)),
               default=0.0)  # fmt: skip


def run_arm(url: str, token: str, arm: str, seed: int, sessions: int) -> list[dict]:
    rng = random.Random(seed)
    items = corpus(rng)
    ns = f"ret_{arm}_{seed}"
    origin = simulated_origin(sessions)
    clock = [origin]
    with RMSClient(url, token, timeout=30) as client:
        weights = ARMS[arm]
        client.create_namespace(ns, **({"weights": weights} if weights else {}))
        created = client.create_objects(
            [
                {"namespace": ns, "content": text, "epistemic_type": t, "ts": origin}
                for _, text, t, _ in items
            ]
        )
        ids = [c["id"] for c in created]
        label = {oid: item[0] for oid, item in zip(ids, items, strict=True)}
        sim_ids = {oid: sim_id(item[1]) for oid, item in zip(ids, items, strict=True)}
        texts = [text for _, text, _, _ in items]
        embedding = PlantedEmbedding(texts)
        store = InMemoryVectorStore(embedding)
        mirror_factory = getattr(client, "mirror", None)
        mirror = mirror_factory(ns) if mirror_factory else ServerRanker(client, ns, set(ids))
        if hasattr(mirror, "wait_until_current"):
            mirror.wait_until_current(timeout=30)
        base = store.as_retriever(search_kwargs={"k": K if arm == "similarity" else FETCH_K})
        retriever = base if arm == "similarity" else RMSRetriever(
            base_retriever=base, mirror=mirror, k=K, fetch_k=FETCH_K,
            clock=lambda: clock[0])  # fmt: skip
        series = []
        with client.recorder(flush_at=1, flush_interval=0.05) as rec:
            for n in range(1, sessions + 1):
                query = f"q:{n}"
                embedding.plant(dict(zip(texts, session_similarities(items, rng), strict=True)))
                store.add_texts(texts, metadatas=[{"rms_object_id": oid} for oid in ids], ids=ids)
                clock[0] = now = origin + n * DAY
                docs = retriever.invoke(query)[:K]
                shown = [d.metadata["rms_object_id"] for d in docs]
                mirror_diff = None
                if arm != "similarity" and mirror_factory:
                    hits = store.similarity_search_with_score(query, k=FETCH_K)
                    pairs = [(d.metadata["rms_object_id"], min(1.0, max(0.0, sim)))
                             for d, sim in hits]  # fmt: skip
                    mirror_diff = mirror_vs_rank(mirror, client, ns, pairs, now)
                it = rec.interaction(ns, context_budget=4000, session_id=f"{ns}-{n}", ts=now)
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
                        "top5": [sim_ids[o] for o in shown],
                        "mirror_diff": mirror_diff,
                    }
                )
            if rec.stats["failed"]:
                raise RuntimeError(f"the recorder failed: {rec.stats}")
        if hasattr(mirror, "close"):
            mirror.close()
        diffs = [r["mirror_diff"] for r in series if r["mirror_diff"] is not None]
        if diffs and max(diffs) > MIRROR_TOLERANCE:
            raise RuntimeError(f"the mirror differs from /rank by {max(diffs):.3g} in {ns}")
        ranker = "the vector store" if arm == "similarity" else (
            "mirror" if mirror_factory else "/rank")  # fmt: skip
        print(f"# {arm:10s} seed {seed}: ranked by {ranker}"
              + (f" (= /rank within {max(diffs):.1e})" if diffs else "")
              + "; p@5 "
              + " ".join(f"s{c}={series[c - 1]['p5']:.2f}" for c in CHECKPOINTS if c <= sessions),
              flush=True)  # fmt: skip
        return series


def first_divergence(bench: list[dict], simulated: dict) -> int | None:
    """The first session whose five memories shown differ from the in-process simulation's
    (in order), or None when every session matches."""
    for ours, theirs in zip(bench, simulated["series"], strict=True):
        if ours["top5"] != theirs["top5"]:
            return ours["session"]
    return None


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.pstdev(values) if len(values) > 1 else 0.0
    return f"{mean:.2f} ± {sd:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--db", default=DB, help="scratch database (an rms_bench* name)")
    args = parser.parse_args()
    common.stop_on_sigterm()
    common.setup_database(args.db)
    results: dict[str, list[list[dict]]] = {arm: [] for arm in ARMS}
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    try:
        token = common.create_api_client("bench-admin", role="admin", namespaces=(), db=args.db)
        with common.Server(db=args.db, workers=1, threads=4) as server:
            for seed in args.seeds:
                for arm in ARMS:
                    results[arm].append(run_arm(server.base, token, arm, seed, args.sessions))
    finally:
        common.drop_database(args.db)
    load_after = os.getloadavg()
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
    print(f"# seeds {args.seeds}, {args.sessions} sessions, {time.perf_counter() - t0:.0f} s; "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after")  # fmt: skip
    common.print_table(["arm", "metric", *[f"session {c}" for c in checkpoints]], rows)
    diverged = {
        seed: first_divergence(runs, sim)
        for seed, runs, sim in zip(args.seeds, results["default"], inproc, strict=True)
    }
    same = [seed for seed, at in diverged.items() if at is None]
    print(f"# default arm vs in-process simulation: the same five memories at every session for "
          f"{len(same)} of {len(args.seeds)} seeds"
          + "".join(f"; seed {seed} first differs at session {at}"
                    for seed, at in diverged.items() if at is not None))  # fmt: skip
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
