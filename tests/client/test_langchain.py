"""The LangChain callback handler with langchain-core's own retriever and runnable classes and
a fake model (no network): the right injections, and detection of the model output."""

from __future__ import annotations

import math

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from rms_client import RMSClient
from rms_client.integrations.langchain import RMSCallbackHandler

from feedback.models import FeedbackSession, InjectionEvent
from rms.models import ApiClient
from tests.client.conftest import FAST
from tests.factories import make_object

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = [
    "Alice prefers Python for scripting",
    "Bob deploys with Kubernetes on Fridays",
    "The Lisbon office closes at six",
]


class MemoryRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query, *, run_manager):
        return self.docs


@pytest.fixture
def memory(env):
    owner = ApiClient.objects.get(name="client-1")
    ids = [str(make_object(owner, content=text).pk) for text in TEXTS]
    docs = [
        Document(TEXTS[0], metadata={"rms_object_id": ids[0], "rms_score": 0.91}),
        Document("a web page, not a memory", metadata={"source": "web"}),
        Document(TEXTS[1], metadata={"rms_object_id": ids[1], "score": 0.4}),
        Document(TEXTS[2], metadata={"rms_object_id": ids[2]}),
        Document(TEXTS[0], metadata={"rms_object_id": ids[0]}),  # a duplicate hit: once
    ]
    return ids, MemoryRetriever(docs=docs)


def injections(session):
    rows = InjectionEvent.objects.filter(session=session).order_by("rank_position")
    return [(str(r.object_id), r.rank_position, r.token_cost, r.composite_score) for r in rows]


def test_a_chain_records_its_injections_and_the_models_output_for_detection(env, memory):
    ids, retriever = memory
    model = FakeListLLM(responses=["Alice prefers Python for scripting, so use a script."])
    join = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    chain = (
        {"context": retriever | join, "question": RunnablePassthrough()}
        | RunnableLambda(lambda x: f"Context:\n{x['context']}\n\nQuestion: {x['question']}")
        | model
    )  # fmt: skip
    with RMSClient(env.url, env.client, **FAST) as client:
        with client.recorder(flush_at=10, flush_interval=0.1) as rec:
            handler = RMSCallbackHandler(rec, namespace="support", context_budget=2000)
            out = chain.invoke(
                "what language for a script?",
                config={"callbacks": [handler], "metadata": {"rms_session_id": "lc-1"}},
            )
            assert out.startswith("Alice prefers Python")
            assert rec.flush(timeout=30)
        assert rec.stats["sent"] == 1 and rec.stats["failed"] == 0
    session = FeedbackSession.objects.get(session_id="lc-1")
    tokens = [math.ceil(len(t) / 4) for t in TEXTS]
    assert injections(session) == [
        (ids[0], 1, tokens[0], 0.91),
        (ids[1], 2, tokens[1], 0.4),
        (ids[2], 3, tokens[2], None),
    ]
    record = session.record
    assert record["tokens_used"] == sum(tokens) and record["context_budget"] == 2000
    referenced = {s["object_id"] for s in record["signals"] if s["signal_type"] == "REFERENCED"}
    assert referenced == {ids[0]}
    assert all(s.get("detection_method") == "response_analysis" for s in record["signals"])
    assert set(record["unused_ids"]) == {ids[1], ids[2]}


def test_a_retriever_on_its_own_records_injections_only(env, memory):
    ids, retriever = memory
    client = RMSClient(env.url, env.client, **FAST)
    with client, client.recorder(flush_at=10, flush_interval=0.1) as rec:
        handler = RMSCallbackHandler(rec, namespace="support", session_id="lc-2")
        retriever.invoke("anything", config={"callbacks": [handler]})
    session = FeedbackSession.objects.get(session_id="lc-2")
    assert [i[0] for i in injections(session)] == ids
    assert session.record["signals"] == []  # nothing to analyse: no model output
    assert set(session.record["unused_ids"]) == set(ids)


def test_a_failing_chain_is_recorded_as_failed(env, memory):
    ids, retriever = memory

    def boom(_):
        raise RuntimeError("model down")

    chain = retriever | RunnableLambda(boom)
    client = RMSClient(env.url, env.client, **FAST)
    with client, client.recorder(flush_at=10, flush_interval=0.1) as rec:
        handler = RMSCallbackHandler(rec, namespace="support", session_id="lc-3")
        with pytest.raises(RuntimeError):
            chain.invoke("q", config={"callbacks": [handler]})
    session = FeedbackSession.objects.get(session_id="lc-3")
    assert session.outcome == "FAILED"
    assert len(injections(session)) == 3
