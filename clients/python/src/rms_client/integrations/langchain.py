"""A LangChain callback handler that feeds the recorder (``pip install rms-client[langchain]``).

For each top-level run (a chain, or a retriever called on its own) it builds one interaction:

- every retriever run inside it records its documents that carry ``metadata["rms_object_id"]``
  as injections, ranked in result order (continuing across retrievers), with a token cost
  estimated from the document text and ``composite_score`` from ``metadata["rms_score"]`` or
  ``metadata["score"]`` when present; the retriever's query becomes the ``context_text``;
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
    from langchain_core.callbacks import BaseCallbackHandler
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "rms_client.integrations.langchain needs langchain-core: "
        "pip install 'rms-client[langchain]'"
    ) from exc

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

    def _run_of(self, run_id: uuid.UUID) -> _Run | None:
        return self._runs.get(self._root(run_id))

    def _forget(self, root: uuid.UUID) -> _Run | None:
        with self._lock:
            run = self._runs.pop(root, None)
            for rid in [r for r in self._parents if self._root(r) == root]:
                del self._parents[rid]
        return run

    # --- callbacks ---------------------------------------------------------------------------

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, metadata=None,
                       **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None,
                           metadata=None, **kwargs):  # fmt: skip
        self._start(run_id, parent_run_id, metadata)
        with self._lock:
            run = self._run_of(run_id)
            if run is not None and isinstance(query, str) and query:
                run.context.append(query)

    def on_retriever_end(self, documents, *, run_id, parent_run_id=None, **kwargs):
        with self._lock:
            run = self._run_of(run_id)
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
