"""From OpenTelemetry spans to feedback-session bodies (docs/OTEL.md), with no Django import.

Two steps, both pure:

1. ``extract`` reads one OTLP span into ``SpanFacts``: the few things the loop uses (retrieved
   documents, the model's output, explicit signals, the session id). A span that carries none of
   them and is not a trace's root returns None at the cost of one pass over its attribute keys:
   tool and chain spans cost almost nothing.
2. ``session_body`` turns the facts of one trace, whose documents the caller has resolved to
   objects of the namespace, into the body ``POST /feedback-sessions`` takes. The request id is
   derived from the trace id and the namespace, so a trace re-exported or re-assembled is stored
   once.

Conventions read: OpenInference (``openinference.span.kind`` RETRIEVER / LLM,
``retrieval.documents.<i>.document.*``, ``output.value``, ``llm.output_messages.*``,
``session.id``, ``metadata``) and the OpenTelemetry GenAI conventions (``gen_ai.operation.name``,
``gen_ai.output.messages``, ``gen_ai.retrieval.documents``, ``gen_ai.conversation.id``).
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field

from rms.policy import SIGNAL_TYPES, SYSTEM_ONLY_SIGNALS

#: The uuid5 namespace of request ids derived from traces (fixed: changing it would store every
#: re-exported trace a second time).
REQUEST_ID_NAMESPACE = uuid.UUID("6c4f1f1e-6a53-5b0e-9a57-0e2f4c7b1d3a")
#: The context budget of a session whose spans do not say (the LangChain handler's default).
DEFAULT_CONTEXT_BUDGET = 4096
#: Entries of one session the API takes (feedback.api.serializers.MAX_ENTRIES).
MAX_ENTRIES = 1000
MAX_TEXT = 200_000
MAX_CONTEXT_TEXT = 100_000
MAX_SESSION_ID = 200

NAMESPACE_KEY = "rms.namespace"
BUDGET_KEY = "rms.context_budget"
SIGNAL_PREFIX = "rms.signal."
OBJECT_ID_META = "rms_object_id"
SCORE_META = ("rms_score", "score")
TOKENS_META = ("rms_token_cost", "token_cost")
SESSION_META = "rms_session_id"
SPAN_KIND = "openinference.span.kind"
GENAI_OPERATION = "gen_ai.operation.name"
GENAI_RETRIEVAL_OPS = frozenset({"retrieval", "retrieve", "search_memory", "memory_search"})
GENAI_MODEL_OPS = frozenset({"chat", "text_completion", "generate_content"})
EVALUATION_EVENT = "gen_ai.evaluation.result"
ACCEPTED_SIGNALS = frozenset(SIGNAL_TYPES) - SYSTEM_ONLY_SIGNALS
#: Attribute keys (or prefixes) that make a span worth reading in full.
_INTERESTING = ("openinference.span.kind", "gen_ai.operation.name", "rms.signal.")
#: google.rpc / OTLP Status code of a failed span.
STATUS_ERROR = 2


@dataclass(frozen=True)
class Doc:
    """One retrieved document: the ids that may name an object (``document.id``, then
    ``metadata.rms_object_id``), its score and its token cost."""

    refs: tuple[str, ...]
    score: float | None
    token_cost: int


@dataclass(frozen=True)
class SpanFacts:
    trace_id: str
    span_id: str
    is_root: bool
    start_ns: int
    end_ns: int
    namespace: str | None = None
    session_id: str | None = None
    failed: bool = False
    context_budget: int | None = None
    query: str | None = None
    docs: tuple[Doc, ...] = ()
    output: str | None = None
    signals: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = field(default=())

    @property
    def relevant(self) -> bool:
        return bool(self.docs or self.output is not None or self.signals)


def estimate_tokens(text: str) -> int:
    """About four characters a token (the client's LangChain handler does the same); ≥ 1."""
    return max(1, math.ceil(len(text) / 4))


def request_id(trace_id: str, namespace: str) -> str:
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, f"{namespace}/{trace_id}"))


# --- reading a span ------------------------------------------------------------------------------


def any_value(value):
    """An OTLP AnyValue as a plain Python value."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def attributes(key_values) -> dict:
    return {kv.key: any_value(kv.value) for kv in key_values}


def _interesting(key_values) -> bool:
    return any(kv.key.startswith(_INTERESTING) for kv in key_values)


def _json(value):
    if isinstance(value, dict | list):
        return value
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return None


def _text(value) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def extract(span, resource: dict, scope_namespace: str | None = None) -> SpanFacts | None:
    """The facts of one OTLP ``Span`` (resource attributes already read), or None for a span
    that is neither about memory nor a trace's root."""
    is_root = not span.parent_span_id
    interesting = _interesting(span.attributes) or any(
        e.name == EVALUATION_EVENT or _interesting(e.attributes) for e in span.events
    )
    if not interesting and not is_root:
        return None
    attrs = attributes(span.attributes)
    metadata = _json(attrs.get("metadata")) or {}
    if not isinstance(metadata, dict):
        metadata = {}
    namespace = attrs.get(NAMESPACE_KEY) or resource.get(NAMESPACE_KEY) or scope_namespace
    budget = attrs.get(BUDGET_KEY, resource.get(BUDGET_KEY))
    facts = {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "is_root": is_root,
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "namespace": namespace if isinstance(namespace, str) and namespace else None,
        "session_id": _session_id(attrs, metadata),
        "failed": span.status.code == STATUS_ERROR,
        "context_budget": budget if type(budget) is int and budget >= 0 else None,
    }
    errors: list[str] = []
    if interesting:
        kind = attrs.get(SPAN_KIND)
        operation = attrs.get(GENAI_OPERATION)
        if kind == "RETRIEVER":
            facts["docs"] = _openinference_docs(attrs)
            facts["query"] = _text(attrs.get("input.value"))
        elif operation in GENAI_RETRIEVAL_OPS:
            facts["docs"] = _genai_docs(attrs)
            facts["query"] = _text(attrs.get("gen_ai.retrieval.query.text"))
        if kind == "LLM":
            facts["output"] = _openinference_output(attrs)
        elif operation in GENAI_MODEL_OPS:
            facts["output"] = _genai_output(attrs, span.events)
        facts["signals"] = _signals(attrs, span.events, errors)
    return SpanFacts(**facts, errors=tuple(errors))


def _session_id(attrs: dict, metadata: dict) -> str | None:
    for value in (
        attrs.get("session.id"),
        attrs.get("gen_ai.conversation.id"),
        metadata.get(SESSION_META),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()[:MAX_SESSION_ID]
    return None


def _doc(refs: list, score, content, metadata) -> Doc | None:
    meta = _json(metadata) if not isinstance(metadata, dict) else metadata
    meta = meta if isinstance(meta, dict) else {}
    refs = [*refs, meta.get(OBJECT_ID_META)]
    found = tuple(str(r) for r in refs if isinstance(r, str | uuid.UUID) and str(r).strip())
    if not found:
        return None
    if not isinstance(score, int | float) or isinstance(score, bool):
        score = next((meta[k] for k in SCORE_META if _number(meta.get(k))), None)
    score = float(score) if _number(score) else None
    tokens = next((meta[k] for k in TOKENS_META if type(meta.get(k)) is int and meta[k] >= 1), None)
    if tokens is None:
        tokens = estimate_tokens(content if isinstance(content, str) else "")
    return Doc(found, score, tokens)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _openinference_docs(attrs: dict) -> tuple[Doc, ...]:
    prefix = "retrieval.documents."
    docs: dict[int, dict] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, name = key[len(prefix) :].partition(".document.")
        if index.isdigit() and name:
            docs.setdefault(int(index), {})[name] = value
    out = []
    for index in sorted(docs):
        d = docs[index]
        doc = _doc([d.get("id")], d.get("score"), d.get("content"), d.get("metadata"))
        if doc is not None:
            out.append(doc)
    return tuple(out)


def _genai_docs(attrs: dict) -> tuple[Doc, ...]:
    documents = _json(attrs.get("gen_ai.retrieval.documents"))
    if not isinstance(documents, list):
        return ()
    out = []
    for d in documents:
        if isinstance(d, dict):
            doc = _doc([d.get("id")], d.get("score"), d.get("content"), d.get("metadata"))
            if doc is not None:
                out.append(doc)
    return tuple(out)


def _openinference_output(attrs: dict) -> str | None:
    prefix = "llm.output_messages."
    messages: dict[int, str] = {}
    for key, value in attrs.items():
        if key.startswith(prefix) and key.endswith(".message.content"):
            index = key[len(prefix) :].split(".", 1)[0]
            if index.isdigit() and _text(value):
                messages[int(index)] = value
    if messages:
        return messages[max(messages)]
    value = attrs.get("output.value")
    if attrs.get("output.mime_type", "text/plain") == "text/plain":
        return _text(value)
    return _generation_text(_json(value))


def _generation_text(document) -> str | None:
    """The last generation's text of a serialized LLMResult (``{"generations": [[...]]}``)."""
    if not isinstance(document, dict):
        return None
    generations = document.get("generations")
    if isinstance(generations, list) and generations and isinstance(generations[-1], list):
        last = generations[-1]
        if last and isinstance(last[0], dict):
            return _text(last[0].get("text"))
    return None


def _genai_output(attrs: dict, events) -> str | None:
    messages = _json(attrs.get("gen_ai.output.messages"))
    if isinstance(messages, list) and messages:
        parts = messages[-1].get("parts") if isinstance(messages[-1], dict) else None
        if isinstance(parts, list):
            text = "".join(
                p.get("content", "")
                for p in parts
                if isinstance(p, dict) and p.get("type") == "text"
                and isinstance(p.get("content"), str)
            )  # fmt: skip
            if text.strip():
                return text
    for event in reversed(events):  # the older convention: a gen_ai.choice event
        if event.name == "gen_ai.choice":
            message = attributes(event.attributes).get("message")
            if isinstance(message, dict):
                return _text(message.get("content"))
            text = _json(message)
            if isinstance(text, dict):
                return _text(text.get("content"))
    return None


def _signals(attrs: dict, events, errors: list[str]) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []

    def add(ref, signal_type) -> None:
        if not isinstance(ref, str) or not ref.strip():
            return
        if signal_type not in ACCEPTED_SIGNALS:
            errors.append("invalid_signal")
            return
        found.append((ref.strip(), signal_type))

    for key, value in attrs.items():
        if key.startswith(SIGNAL_PREFIX):
            add(key[len(SIGNAL_PREFIX) :], value)
    for event in events:
        if event.name != EVALUATION_EVENT and not _interesting(event.attributes):
            continue
        ev = attributes(event.attributes)
        ref = ev.get("rms.object_id")
        if ref is not None:
            add(ref, ev.get("rms.signal_type") or ev.get("gen_ai.evaluation.score.label"))
    return tuple(found)


# --- one trace into one session ------------------------------------------------------------------


def session_body(
    *,
    trace_id: str,
    namespace: str,
    spans: list[SpanFacts],
    objects: dict[str, str],
) -> dict | None:
    """The ``POST /feedback-sessions`` body of one trace, or None when it has nothing to record
    (no injection and no signal). ``objects`` maps each document or signal reference that names
    an object of ``namespace`` to that object's id; other references are left out.

    Injections are ranked in retrieval order (spans by start time, then each span's document
    order), an object retrieved twice keeps its first rank; the response is the output of the
    model span that ended last, analysed (``detect``) when the session has injections."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.end_ns, s.span_id))
    injections: list[dict] = []
    seen: set[str] = set()
    queries: list[str] = []
    for span in ordered:
        if span.query and span.docs:
            queries.append(span.query)
        for doc in span.docs:
            object_id = next((objects[r] for r in doc.refs if r in objects), None)
            if object_id is None or object_id in seen or len(injections) >= MAX_ENTRIES:
                continue
            seen.add(object_id)
            entry = {"object_id": object_id, "rank_position": len(injections) + 1}
            entry["token_cost"] = doc.token_cost
            if doc.score is not None:
                entry["composite_score"] = doc.score
            injections.append(entry)
    signals = []
    for span in ordered:
        for ref, signal_type in span.signals:
            if ref in objects and len(signals) < MAX_ENTRIES:
                signals.append({"object_id": objects[ref], "signal_type": signal_type})
    if not injections and not signals:
        return None
    root = next((s for s in ordered if s.is_root), None)
    session_id = (root.session_id if root else None) or next(
        (s.session_id for s in ordered if s.session_id), trace_id
    )
    budget = next(
        (s.context_budget for s in ([root] if root else []) + ordered if s.context_budget),
        DEFAULT_CONTEXT_BUDGET,
    )
    body: dict = {
        "session_id": session_id,
        "request_id": request_id(trace_id, namespace),
        "namespace_scope": [namespace],
        "context_budget": budget,
        "tokens_used": sum(i["token_cost"] for i in injections),
        "injections": injections,
        "signals": signals,
    }
    if queries:
        body["context_text"] = "\n".join(queries)[:MAX_CONTEXT_TEXT]
    outputs = [s for s in ordered if s.output is not None]
    if outputs and injections:
        last = max(outputs, key=lambda s: (s.end_ns, s.start_ns))
        body["response_text"] = last.output[:MAX_TEXT]
        body["detect"] = True
    if root is not None and root.failed:
        body["outcome"] = "FAILED"
    return body


def references(spans: list[SpanFacts]) -> set[str]:
    """Every document and signal reference of these spans (the ids to look up)."""
    refs = {r for s in spans for d in s.docs for r in d.refs}
    refs.update(ref for s in spans for ref, _ in s.signals)
    return refs


def as_uuid(ref: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(ref)
    except (ValueError, AttributeError, TypeError):
        return None


def facts_to_json(facts: SpanFacts, objects: dict[str, str]) -> dict:
    """What is stored of a span until its trace is assembled: its facts, with the references
    already resolved to object ids (unresolved documents and signals dropped)."""
    docs = []
    for d in facts.docs:
        object_id = next((objects[r] for r in d.refs if r in objects), None)
        if object_id is not None:
            docs.append([object_id, d.score, d.token_cost])
    return {
        "root": facts.is_root,
        "start": facts.start_ns,
        "end": facts.end_ns,
        "session_id": facts.session_id,
        "failed": facts.failed,
        "budget": facts.context_budget,
        "query": facts.query,
        "docs": docs,
        "output": facts.output,
        "signals": [[objects[r], t] for r, t in facts.signals if r in objects],
    }


def facts_from_json(trace_id: str, span_id: str, data: dict) -> SpanFacts:
    """The stored form back (references are object ids now, so they resolve to themselves)."""
    return SpanFacts(
        trace_id=trace_id,
        span_id=span_id,
        is_root=data["root"],
        start_ns=data["start"],
        end_ns=data["end"],
        session_id=data.get("session_id"),
        failed=data.get("failed", False),
        context_budget=data.get("budget"),
        query=data.get("query"),
        docs=tuple(Doc((oid,), score, tokens) for oid, score, tokens in data.get("docs", [])),
        output=data.get("output"),
        signals=tuple((oid, t) for oid, t in data.get("signals", [])),
    )
