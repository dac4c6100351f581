"""Prometheus counters of OTLP ingestion; rendered by ``GET /metrics`` with every other metric
(prometheus_client's default registry, multiprocess mode included)."""

from prometheus_client import Counter

SPANS_RECEIVED = Counter("rms_otlp_spans_received", "Spans in accepted OTLP trace exports.")
SPANS_MAPPED = Counter(
    "rms_otlp_spans_mapped",
    "Spans about memory (retrieval, model output, signals) kept for their trace's session.",
)
SPANS_REJECTED = Counter(
    "rms_otlp_spans_rejected",
    "Spans refused (counted in partial_success.rejected_spans), by reason.",
    ["reason"],
)
TRACES_WRITTEN = Counter(
    "rms_otlp_traces",
    "Traces assembled, by result: session (a session written), empty (nothing to record), "
    "failed (the session was refused).",
    ["result"],
)
