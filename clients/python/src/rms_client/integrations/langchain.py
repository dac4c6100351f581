"""A LangChain callback handler that feeds the recorder (``pip install rms-client[langchain]``).

For each top-level run (a chain, or a retriever called on its own) it builds one interaction:

- every retriever run inside it records its documents that carry ``metadata["rms_object_id"]``
  as injections, ranked in result order (continuing across retrievers), with a token cost
  estimated from the document text and ``composite_score`` from ``metadata["rms_score"]`` or
  ``metadata["score"]`` when present; the retriever's query becomes the ``context_text``. A
  retriever run inside another retriever (the base of ``RMSRetriever`` or of a compressing
  retriever) is not recorded: the outer retriever's documents are what the chain receives;
- when the top-level chain ends, the model output (the last LLM generation inside the run, else
  the chain's own output) is attached with ``detect: true`` so the service infers REFERENCED /
  UNUSED, and the interaction is queued. A chain that raises is queued with outcome FAILED.

The session id is ``metadata["rms_session_id"]`` of the run's config, else the handler's
``session_id``, else the top-level run id. Nothing here touches the network: the recorder sends.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        BaseCallbackHandler,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import InMemoryVectorStore
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "rms_client.integrations.langchain needs langchain-core: "
        "pip install 'rms-client[langchain]'"
    ) from exc

from rms_client.integrations.rerank import clock_value, rerank
from rms_client.recorder import Interaction, Recorder

OBJECT_ID_KEY = "rms_object_id"
SCORE_KEYS = ("rms_score", "score")
SESSION_KEY = "rms_session_id"


def estimate_tokens(text: str) -> int:
    """About four characters a token (OpenAI's rule of thumb for English); at least 1."""
    return max(1, math.ceil(len(text) / 4))


def output_text(value: Any) -> str | None:
    """The text of a chain or model output: a string, a message's content, an LLMResult's
    last generation, or the ``output``/``answer``/``result``/``text`` of a dict."""
    if isinstance(value, str):
        return value
    generations = getattr(value, "generations", None)
    if generations:
        last = generations[-1]
        if last:
            gen = last[0]
            message = getattr(gen, "message", None)
            return output_text(message) if message is not None else getattr(gen, "text", None)
    content = getattr(value, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text", "") for p in content]
        return "".join(p for p in parts if isinstance(p, str)) or None
    if isinstance(value, dict):
        for key in ("output", "answer", "result", "text", "content"):
            if key in value:
                return output_text(value[key])
        if len(value) == 1:
            return output_text(next(iter(value.values())))
    return None


class _Run:
    __slots__ = ("interaction", "model_output", "context")

    def __init__(self, interaction: Interaction) -> None:
        self.interaction = interaction
        self.model_output: str | None = None
        self.context: list[str] = []


class RMSCallbackHandler(BaseCallbackHandler):
    """Pass it in ``config={"callbacks": [handler]}`` (or a runnable's ``with_config``)."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        namespace: str | Sequence[str],
        context_budget: int = 4096,
        session_id: str | None = None,
        detect: bool = True,
        token_counter: Callable[[str], int] = estimate_tokens,
        representation_type: str | None = None,
    ) -> None:
        self.recorder = recorder
        self.namespace = namespace
        self.context_budget = context_budget
        self.session_id = session_id
        self.detect = detect
        self.token_counter = token_counter
        self.representation_type = representation_type
        self._lock = threading.Lock()
        self._parents: dict[uuid.UUID, uuid.UUID | None] = {}
        self._runs: dict[uuid.UUID, _Run] = {}
        self._retrievers: set[uuid.UUID] = set()

    # --- run tree ----------------------------------------------------------------------------

    def _root(self, run_id: uuid.UUID) -> uuid.UUID:
        seen = 0
        while (parent := self._parents.get(run_id)) is not None and seen < 1000:
            run_id, seen = parent, seen + 1
        return run_id

    def _start(self, run_id: uuid.UUID, parent_run_id: uuid.UUID | None, metadata: Any) -> None:
        with self._lock:
            self._parents[run_id] = parent_run_id
            if parent_run_id is None and run_id not in self._runs:
                session = (metadata or {}).get(SESSION_KEY) or self.session_id or str(run_id)
                self._runs[run_id] = _Run(
                    self.recorder.interaction(
                        self.namespace, context_budget=self.context_budget, session_id=session
                    )
                )

    def _inside_retriever(self, run_id: uuid.UUID) -> bool:
        parent, seen = self._parents.get(run_id), 0
        while parent is not None and seen < 1000:
            if parent in self._retrievers:
                return True
            parent, seen = self._parents.get(parent), seen + 1
        return False

    def _run_of(self, run_id: uuid.UUID) -> _Run | None:
        return self._runs.get(self._root(run_id))

    def _forget(self, root: uuid.UUID) -> _Run | None:
        with self._lock:
            run = self._runs.pop(root, None)
            for rid in [r for r in self._parents if self._root(r) == root]:
                del self._parents[rid]
                self._retrievers.discard(rid)
        return run

    # --- callbacks ---------------------------------------------------------------------------

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, metadata=None,
                       **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None,
                           metadata=None, **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)
        with self._lock:
            nested = self._inside_retriever(run_id)
            self._retrievers.add(run_id)
            run = None if nested else self._run_of(run_id)
            if run is not None and isinstance(query, str) and query:
                run.context.append(query)

    def on_retriever_end(self, documents, *, run_id, parent_run_id=None, **kwargs):
        with self._lock:
            run = None if self._inside_retriever(run_id) else self._run_of(run_id)
            if run is None:
                return
            it = run.interaction
            for doc in documents:
                meta = getattr(doc, "metadata", None) or {}
                object_id = meta.get(OBJECT_ID_KEY)
                if not object_id or str(object_id) in it._injected:
                    continue
                score = next((meta[k] for k in SCORE_KEYS if meta.get(k) is not None), None)
                it.injected(
                    str(object_id),
                    token_cost=self.token_counter(getattr(doc, "page_content", "") or ""),
                    composite_score=float(score) if score is not None else None,
                    representation_type=self.representation_type,
                )
        if parent_run_id is None:  # a retriever on its own: nothing more will come
            self._finish(run_id, None)

    def on_llm_start(self, serialized, prompts, *, run_id, parent_run_id=None, metadata=None,
                     **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None,
                            metadata=None, **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)

    def on_llm_end(self, response, *, run_id, parent_run_id=None, **kwargs):
        with self._lock:
            run = self._run_of(run_id)
            if run is not None:
                run.model_output = output_text(response) or run.model_output
        if parent_run_id is None:
            self._finish(run_id, None)

    def on_chain_end(self, outputs, *, run_id, parent_run_id=None, **kwargs):
        if parent_run_id is None:
            self._finish(run_id, outputs)

    def on_chain_error(self, error, *, run_id, parent_run_id=None, **kwargs):
        if parent_run_id is None:
            self._finish(run_id, None, failed=True)

    def on_retriever_error(self, error, *, run_id, parent_run_id=None, **kwargs):
        if parent_run_id is None:
            self._finish(run_id, None, failed=True)

    def _finish(self, root: uuid.UUID, outputs: Any, *, failed: bool = False) -> None:
        run = self._forget(root)
        if run is None:
            return
        it = run.interaction
        if run.context:
            it.body["context_text"] = "\n".join(run.context)
        text = run.model_output or (output_text(outputs) if outputs is not None else None)
        if text and text.strip() and it._injected:
            it.response(text, detect=self.detect)
        if failed:
            it.outcome("FAILED")
        it.record()


# --- the re-ranking retriever ----------------------------------------------------------------

#: Metadata keys read as the base retriever's relevance score (a similarity in [0, 1]).
SIMILARITY_KEYS = ("relevance_score", "similarity")
#: Vector-store search types whose relevance scores the retriever asks the store for directly.
_SCORED_SEARCH_TYPES = ("similarity", "similarity_score_threshold")


def _cosine_store(store: Any) -> bool:
    """langchain-core's InMemoryVectorStore: no relevance function, but its
    ``similarity_search_with_score`` is the cosine similarity (higher is closer)."""
    return isinstance(store, InMemoryVectorStore)


class RMSRetriever(BaseRetriever):
    """Re-ranks any LangChain retriever with what the feedback loop learned, in-process.

    It over-fetches ``fetch_k`` documents from ``base_retriever``, drops objects the namespace's
    retrieval profile makes ineligible (deprecated, a condition not met, under the confidence
    floor), orders the rest by ``mirror.rank`` (the same score ``/rank`` gives) and returns the
    best ``k`` with ``metadata["rms_object_id"]`` and ``metadata["rms_score"]``. Documents
    without ``rms_object_id`` (or with one the mirror does not hold yet) follow the ranked ones
    unranked, in the base order.

    Similarity: a vector-store retriever (``vectorstore.as_retriever()`` with search type
    ``similarity`` or ``similarity_score_threshold``) is asked for ``fetch_k`` hits with the
    store's relevance scores (langchain-core's ``InMemoryVectorStore``, which has none: its
    cosine similarity; a store without either: as below); any other retriever is invoked as it
    is (configure it to return ``fetch_k``) and a document's ``metadata["relevance_score"]`` or
    ``["similarity"]`` is its similarity, else ``1 - i / n`` from its position (see
    ``rms_client.integrations.rerank``).

    With ``RMSCallbackHandler`` in the callbacks, the injections recorded are the documents this
    retriever returns, ranked 1..k in its order: a base retriever run inside it is not recorded.
    """

    base_retriever: BaseRetriever
    mirror: Any
    k: int = 5
    fetch_k: int = 20
    #: The clock decay and hotness are computed at (``mirror.rank(now=...)``); None: now.
    clock: Callable[[], Any] | None = None

    def model_post_init(self, context: Any) -> None:
        if self.k < 1 or self.fetch_k < self.k:
            raise ValueError("RMSRetriever needs 1 <= k <= fetch_k.")

    # --- fetching ----------------------------------------------------------------------------

    def _scored_store(self) -> tuple[Any, dict] | None:
        vectorstore = getattr(self.base_retriever, "vectorstore", None)
        search_type = getattr(self.base_retriever, "search_type", None)
        if vectorstore is None or search_type not in _SCORED_SEARCH_TYPES:
            return None
        kwargs = dict(getattr(self.base_retriever, "search_kwargs", None) or {})
        kwargs["k"] = self.fetch_k
        return vectorstore, kwargs

    @staticmethod
    def _from_metadata(docs: Sequence[Document]) -> list[tuple[Document, Any]]:
        out = []
        for doc in docs:
            meta = doc.metadata or {}
            out.append((doc, next((meta[k] for k in SIMILARITY_KEYS if k in meta), None)))
        return out

    def _fetch(self, query: str, run_manager: CallbackManagerForRetrieverRun) -> list:
        scored = self._scored_store()
        if scored is not None:
            store, kwargs = scored
            if _cosine_store(store):
                return list(store.similarity_search_with_score(query, **kwargs))
            try:
                return list(store.similarity_search_with_relevance_scores(query, **kwargs))
            except NotImplementedError:
                pass  # a store with no relevance function: rank-derived similarity
        docs = self.base_retriever.invoke(query, config={"callbacks": run_manager.get_child()})
        return self._from_metadata(docs[: self.fetch_k])

    async def _afetch(self, query: str, run_manager: AsyncCallbackManagerForRetrieverRun) -> list:
        scored = self._scored_store()
        if scored is not None:
            store, kwargs = scored
            if _cosine_store(store):
                return list(await store.asimilarity_search_with_score(query, **kwargs))
            try:
                return list(await store.asimilarity_search_with_relevance_scores(query, **kwargs))
            except NotImplementedError:
                pass
        docs = await self.base_retriever.ainvoke(
            query, config={"callbacks": run_manager.get_child()}
        )
        return self._from_metadata(docs[: self.fetch_k])

    # --- re-ranking --------------------------------------------------------------------------

    def _rerank(self, hits: list[tuple[Document, Any]]) -> list[Document]:
        placed = rerank(
            [((doc.metadata or {}).get(OBJECT_ID_KEY), sim) for doc, sim in hits],
            self.mirror,
            now=clock_value(self.clock),
        )
        out = []
        for p in placed[: self.k]:
            doc = hits[p.index][0]
            meta = dict(doc.metadata or {})
            if p.score is not None:
                meta[OBJECT_ID_KEY] = p.object_id
                meta["rms_score"] = p.score
            out.append(doc.model_copy(update={"metadata": meta}))
        return out

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._rerank(self._fetch(query, run_manager))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._rerank(await self._afetch(query, run_manager))
