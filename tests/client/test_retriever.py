"""RMSRetriever with langchain-core's InMemoryVectorStore and DeterministicFakeEmbedding and the
client's score mirror over a live server: over-fetch, eligibility, /rank's order and scores at
the same clock (1e-12), metadata, pass-through of non-memories, and the injections our callback
handler records through the real recorder."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from rms_client import RMSClient
from rms_client.integrations.langchain import RMSCallbackHandler, RMSRetriever
from rms_client.integrations.rerank import clamp_similarity, rank_derived_similarity

from feedback.models import FeedbackSession, InjectionEvent
from tests.client.conftest import FAST

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = [f"memory {i}: the customer asked about refund case {i * 7}" for i in range(12)]
QUERY = "how do refunds work?"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def mirror_of(client):
    mirror = client.mirror("support")
    assert mirror.wait_until_current(timeout=30)
    return mirror


@pytest.fixture
def world(env):
    """Twelve memories in a vector store; the object behind the first one deprecated, two
    others penalised so the profile's confidence weight moves them."""
    with RMSClient(env.url, env.client, **FAST) as client:
        ids = [
            client.create_object(namespace="support", content=t, epistemic_type="OBSERVED")["id"]
            for t in TEXTS
        ]
        for oid in ids[3:5]:
            client.signal(oid, "CORRECTED", session_id="s-penalty", actor_id="user-9",
                          actor_type="HUMAN_USER")  # fmt: skip
    with RMSClient(env.url, env.admin, **FAST) as admin:
        admin.transition(ids[0], "DEPRECATED", "wrong")
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
    docs = [Document(t, metadata={"rms_object_id": oid}) for t, oid in zip(TEXTS, ids, strict=True)]
    docs.append(Document("a web page about refunds", metadata={"source": "web"}))
    store.add_documents(docs)
    return ids, store


def expected(client, store, ids, fetch_k, k):
    """The order /rank gives the store's own top fetch_k, ineligible dropped, non-memories
    after, cut at k."""
    hits = store.similarity_search_with_score(QUERY, k=fetch_k)
    memories = [(d.metadata["rms_object_id"], clamp_similarity(s)) for d, s in hits
                if "rms_object_id" in d.metadata]  # fmt: skip
    ranked = [r for r in client.rank("support", memories, now=NOW) if r["eligible"]]
    others = [d.page_content for d, _ in hits if "rms_object_id" not in d.metadata]
    return [(r["object_id"], r["score"]) for r in ranked][:k], others


def test_it_reranks_the_over_fetched_hits_exactly_as_rank_orders_them(env, world):
    ids, store = world
    with RMSClient(env.url, env.client, **FAST) as client, mirror_of(client) as mirror:
        retriever = RMSRetriever(base_retriever=store.as_retriever(), mirror=mirror, k=5,
                                 fetch_k=13, clock=lambda: NOW)  # fmt: skip
        assert isinstance(retriever, BaseRetriever)
        docs = retriever.invoke(QUERY)
        # /rank over the store's own cosine similarities, at the same clock.
        want, others = expected(client, store, ids, 13, 13)
        got = [(d.metadata["rms_object_id"], d.metadata["rms_score"]) for d in docs]
        assert [oid for oid, _ in got] == [oid for oid, _ in want[:5]]
        assert [s for _, s in got] == pytest.approx([s for _, s in want[:5]], abs=1e-12, rel=0)
        assert ids[0] not in [oid for oid, _ in got]  # deprecated: never offered
        # With k = fetch_k every eligible memory comes, then the web page, unranked.
        retriever = RMSRetriever(base_retriever=store.as_retriever(), mirror=mirror, k=13,
                                 fetch_k=13, clock=lambda: NOW)  # fmt: skip
        docs = retriever.invoke(QUERY)
        # A deprecation made now reaches the retriever through the mirror's feed.
        with RMSClient(env.url, env.admin, **FAST) as admin:
            admin.transition(got[0][0], "DEPRECATED", "stale")
        assert mirror.wait_until_current(timeout=30)
        after = [d.metadata.get("rms_object_id") for d in retriever.invoke(QUERY)]
        assert after == [oid for oid, _ in want if oid != got[0][0]] + [None]
    assert [d.metadata.get("rms_object_id") for d in docs[:11]] == [oid for oid, _ in want]
    assert len(docs) == 12 and docs[-1].page_content == others[0]
    assert "rms_score" not in docs[-1].metadata
    # The penalised objects rank last of the memories (their confidence fell).
    assert {oid for oid, _ in want[-2:]} == set(ids[3:5])
    # A fetch_k of 4 sees only the store's top 4 memories.
    top4 = [d.metadata["rms_object_id"] for d in store.similarity_search(QUERY, k=4)]
    with RMSClient(env.url, env.client, **FAST) as client, mirror_of(client) as mirror:
        retriever = RMSRetriever(base_retriever=store.as_retriever(), mirror=mirror, k=4,
                                 fetch_k=4, clock=lambda: NOW)  # fmt: skip
        assert {d.metadata.get("rms_object_id") for d in retriever.invoke(QUERY)} <= set(top4)


class ListRetriever(BaseRetriever):
    """A retriever with no scores: the similarity is rank-derived."""

    docs: list[Document]

    def _get_relevant_documents(self, query, *, run_manager):
        return list(self.docs)


def test_a_retriever_without_scores_gets_rank_derived_similarities_and_async_works(env, world):
    ids, _ = world
    docs = [Document(f"m{i}", metadata={"rms_object_id": oid}) for i, oid in enumerate(ids[1:7])]
    docs.insert(2, Document("no id"))
    docs.append(Document("unknown to the mirror", metadata={"rms_object_id": "not-mirrored"}))
    n = len(docs)
    pairs = [
        (d.metadata["rms_object_id"], rank_derived_similarity(i, n))
        for i, d in enumerate(docs)
        if d.metadata.get("rms_object_id") in ids
    ]
    with RMSClient(env.url, env.client, **FAST) as client, mirror_of(client) as mirror:
        retriever = RMSRetriever(base_retriever=ListRetriever(docs=docs), mirror=mirror, k=8,
                                 fetch_k=8, clock=lambda: NOW)  # fmt: skip
        out = asyncio.run(retriever.ainvoke("q"))
        ranked = client.rank("support", pairs, now=NOW)
    assert [d.metadata.get("rms_object_id") for d in out[:6]] == [r["object_id"] for r in ranked]
    assert [d.metadata["rms_score"] for d in out[:6]] == pytest.approx(
        [r["score"] for r in ranked], abs=1e-12, rel=0
    )
    assert [d.page_content for d in out[6:]] == ["no id", "unknown to the mirror"]


def test_the_callback_handler_records_the_reranked_documents_with_their_ranks(env, world):
    ids, store = world
    with RMSClient(env.url, env.client, **FAST) as client, mirror_of(client) as ranker:
        for base in (store.as_retriever(), ListRetriever(docs=store.similarity_search(QUERY, 12))):
            retriever = RMSRetriever(base_retriever=base, mirror=ranker, k=4, fetch_k=12)
            session_id = f"rr-{type(base).__name__}"
            with client.recorder(flush_at=10, flush_interval=0.1) as rec:
                handler = RMSCallbackHandler(rec, namespace="support", context_budget=4000)
                docs = retriever.invoke(
                    QUERY, config={"callbacks": [handler],
                                   "metadata": {"rms_session_id": session_id}}
                )  # fmt: skip
                assert rec.flush(timeout=30)
            assert rec.stats["sent"] == 1 and rec.stats["failed"] == 0
            session = FeedbackSession.objects.get(session_id=session_id)
            rows = InjectionEvent.objects.filter(session=session).order_by("rank_position")
            got = [(str(r.object_id), r.rank_position, r.composite_score) for r in rows]
            assert got == [
                (d.metadata["rms_object_id"], i + 1, d.metadata["rms_score"])
                for i, d in enumerate(docs)
            ]
            assert len(got) == 4 and session.context_text == QUERY
