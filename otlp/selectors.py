"""Reads of OTLP ingestion for other pages (the dashboard's session page)."""

from __future__ import annotations

import uuid

from otlp.models import OtlpTrace


def session_trace_id(session) -> str | None:
    """The id of the trace a feedback session was assembled from, or None. Only a session whose
    request id is a version-5 UUID (``otlp.mapping.request_id``) can come from a trace, so the
    sessions posted by clients cost no query."""
    try:
        if uuid.UUID(session.request_id).version != 5:
            return None
    except ValueError:
        return None
    return (
        OtlpTrace.objects.filter(
            client_id=session.client_id, request_id=session.request_id, state=OtlpTrace.DONE
        )
        .values_list("trace_id", flat=True)
        .first()
    )
