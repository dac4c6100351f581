"""Spans kept until their trace is complete (docs/OTEL.md, "Traces split across exports").

A span that got a 200 is in ``OtlpSpan`` (committed before the answer); its trace's row says
whether the trace may still grow (``open``), is being written (``assembling``), or was written
(``done``: its session written, or nothing to record) or refused
(``failed``, with the reason). Only spans about memory and root spans are stored.
"""

from django.db import models


class OtlpTrace(models.Model):
    OPEN, ASSEMBLING, DONE, FAILED = "open", "assembling", "done", "failed"
    STATES = (OPEN, ASSEMBLING, DONE, FAILED)

    client = models.ForeignKey("rms.ApiClient", on_delete=models.PROTECT, related_name="+")
    trace_id = models.CharField(max_length=32)
    #: The namespace of the trace's first span about memory ("" until one arrives).
    namespace = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(max_length=12, choices=[(s, s) for s in STATES], default=OPEN)
    root_ended = models.BooleanField(default=False)
    has_facts = models.BooleanField(default=False)
    first_span_at = models.DateTimeField()
    last_span_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: The request id of the trace's session (``otlp.mapping.request_id``), set with the
    #: namespace: the dashboard finds a session's trace by it.
    request_id = models.CharField(max_length=200, blank=True, default="")
    #: The compare-and-swap token of the assembly that claimed the trace.
    claim = models.CharField(max_length=32, blank=True, default="")
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client", "trace_id"], name="otlp_trace_client_id")
        ]
        indexes = [
            models.Index(fields=["state", "last_span_at"], name="otlp_trace_state_seen"),
            models.Index(fields=["client", "request_id"], name="otlp_trace_request"),
        ]

    def __str__(self) -> str:
        return f"trace {self.trace_id} ({self.state})"


class OtlpSpan(models.Model):
    trace = models.ForeignKey(OtlpTrace, on_delete=models.CASCADE, related_name="spans")
    span_id = models.CharField(max_length=16)
    #: ``otlp.mapping.facts_to_json``: what the mapping read, references resolved to objects.
    facts = models.JSONField()
    received_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["trace", "span_id"], name="otlp_span_trace_span")
        ]

    def __str__(self) -> str:
        return f"span {self.span_id}"
