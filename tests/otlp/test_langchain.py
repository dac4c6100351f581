"""A real LangChain pipeline (langchain-core retriever over InMemoryVectorStore, a fake chat
model) instrumented by openinference-instrumentation-langchain and exported over OTLP by the
real exporter, configured only by the two environment variables of the README: its session
equals, field for field, the one our own LangChain callback handler records for the same
pipeline."""

from __future__ import annotations

import hashlib

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from rms_client import RMSClient
from rms_client.integrations.langchain import RMSCallbackHandler

from feedback.models import FeedbackSession, InjectionEvent
from otlp.tasks import flush_traces
from rms.models import ApiClient
from tests.client.conftest import FAST
from tests.factories import make_object
from tests.otlp.conftest import PATH, TEXTS

ANSWER = "Alice prefers Python for scripting, so write the job as a Python script."
SESSION = "lc-conv-1"


class HashEmbedding(Embeddings):
    """A deterministic embedding: the first bytes of each text's SHA-256."""

    def embed_query(self, text: str) -> list[float]:
        return [b / 255 for b in hashlib.sha256(text.encode()).digest()[:16]]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]


def pipeline(ids: list[str]):
    store = InMemoryVectorStore(HashEmbedding())
    scores = (0.91, 0.4, None)
    docs = [
        Document(text, metadata={"rms_object_id": oid, **({"rms_score": s} if s else {})})
        for oid, text, s in zip(ids, TEXTS, scores, strict=True)
    ]
    docs.append(Document("a web page, not a memory", metadata={"source": "web"}))
    store.add_documents(docs)
    retriever = store.as_retriever(search_kwargs={"k": 4})
    join = RunnableLambda(lambda found: "\n".join(d.page_content for d in found))
    model = FakeListChatModel(responses=[ANSWER])
    prompt = RunnableLambda(lambda x: f"Context:\n{x['context']}\n\nQuestion: {x['question']}")
    return {"context": retriever | join, "question": RunnablePassthrough()} | prompt | model


QUESTION = "which language for the nightly job?"
CONFIG = {"metadata": {"rms_session_id": SESSION}}


def comparable(session: FeedbackSession, ids: list[str]) -> dict:
    """The session with its object ids replaced by their index in ``ids`` and the fields that
    are unique to each stored session (ids, time, operation ids) left out."""
    index = {oid: i for i, oid in enumerate(ids)}
    record = dict(session.record)
    for key in ("id", "request_id", "ts"):
        record.pop(key)
    record["injected_object_ids"] = [index[o] for o in record["injected_object_ids"]]
    record["unused_ids"] = sorted(index[o] for o in record["unused_ids"])
    record["signals"] = sorted(
        (
            {
                **{k: v for k, v in s.items() if k != "operation_id"},
                "object_id": index[s["object_id"]],
            }
            for s in record["signals"]
        ),
        key=lambda s: (s["object_id"], s["signal_type"]),
    )
    rows = InjectionEvent.objects.filter(session=session).order_by("rank_position")
    record["injections"] = [
        (index[str(r.object_id)], r.rank_position, r.token_cost, r.composite_score, r.ended_unused)
        for r in rows
    ]
    record["context_text"] = session.context_text
    return record


def test_openinference_over_otlp_records_what_our_callback_handler_records(env, monkeypatch):
    owner = ApiClient.objects.get(name="client-1")
    twin_ids = [str(make_object(owner, content=text).pk) for text in TEXTS]

    # 1. our callback handler, through the client's recorder
    client = RMSClient(env.url, env.client, **FAST)
    with client, client.recorder(flush_at=10, flush_interval=0.1) as rec:
        handler = RMSCallbackHandler(rec, namespace="support")
        out = pipeline(env.ids).invoke(QUESTION, config={**CONFIG, "callbacks": [handler]})
        assert out.content == ANSWER
        assert rec.flush(timeout=30)
    by_handler = FeedbackSession.objects.get()

    # 2. the same pipeline over the twin objects, OpenInference + OTLP, configured by env vars
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", env.url + PATH)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Token%20{env.client}")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert pipeline(twin_ids).invoke(QUESTION, config=CONFIG).content == ANSWER
        assert provider.force_flush(30_000)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    assert flush_traces() == 1
    over_otlp = FeedbackSession.objects.exclude(pk=by_handler.pk).get()

    handler_view = comparable(by_handler, env.ids)
    assert handler_view == comparable(over_otlp, twin_ids)
    # and the comparison is about something: three injections, a query, detection ran
    assert sorted(i[0] for i in handler_view["injections"]) == [0, 1, 2]
    assert handler_view["context_text"] == QUESTION
    assert {s["signal_type"] for s in handler_view["signals"]} == {"REFERENCED"}
    assert len(handler_view["unused_ids"]) == 2
    assert handler_view["session_id"] == SESSION
