"""The CSV export's reads (API.md "Export"): for each kind, its header and the rows of one
namespace, streamed in bounded chunks. The view neutralises formulas (``feedback.csvsafe``) and
writes the CSV; nothing here knows about HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator

from feedback import session_record
from feedback.models import FeedbackAggregate, FeedbackSession
from feedback.selectors import records_for_reader
from rms.policy import TOTAL_FIELDS
from rms.replay import iso

SESSION_COLUMNS = [
    "id",
    "session_id",
    "request_id",
    "ts",
    "outcome",
    "namespace_scope",
    "context_budget",
    "tokens_used",
    "injections",
    "signals",
    "unused",
    "session_str_mean",
]
AGGREGATE_COLUMNS = [
    "object_id",
    "epistemic_type",
    "confidence",
    "pinned",
    "total_injections",
    *TOTAL_FIELDS.values(),
    "usage_ratio",
    "last_positive_signal",
    "last_negative_signal",
    "lifetime_gamma_applied",
    "lifetime_delta_applied",
    "unused_streak",
    "utility",
    "uses",
    "content",
]


def session_records(ns, client, chunk: int = 2000):
    """The namespace's session records as ``client`` may see them, a chunk at a time."""
    qs = FeedbackSession.objects.filter(scopes__namespace=ns).order_by("ts", "id")
    batch = []
    for session in qs.only("id", "ts", "stored_record").iterator(chunk_size=chunk):
        batch.append(session)
        if len(batch) == chunk:
            yield from _records(client, batch)
            batch = []
    yield from _records(client, batch)


def _records(client, sessions: list) -> list[dict]:
    session_record.fill(sessions)  # the records the rows do not store: one query a chunk
    return records_for_reader(client, [s.record for s in sessions])


def session_rows(ns, client) -> Iterator[list]:
    """One row per session record of the namespace the client may see, in SESSION_COLUMNS."""
    for s in session_records(ns, client):
        yield [
            s["id"],
            s["session_id"],
            s["request_id"],
            s["ts"],
            s["outcome"] or "",
            " ".join(s["namespace_scope"]),
            s["context_budget"],
            s["tokens_used"],
            len(s["injected_object_ids"]),
            len(s["signals"]),
            len(s["unused_ids"]),
            "" if s["session_str_mean"] is None else s["session_str_mean"],
        ]


def aggregate_rows(ns, client) -> Iterator[list]:
    """One row per aggregate of the namespace, in AGGREGATE_COLUMNS, by object id."""
    qs = (
        FeedbackAggregate.objects.filter(namespace=ns)
        .select_related("object")
        .order_by("object_id")
    )
    for a in qs.iterator(chunk_size=2000):
        o = a.object
        yield [
            o.pk,
            o.epistemic_type,
            o.confidence,
            o.pinned,
            a.total_injections,
            *(getattr(a, f) for f in TOTAL_FIELDS.values()),
            "" if a.usage_ratio is None else a.usage_ratio,
            iso(a.last_positive_signal) or "",
            iso(a.last_negative_signal) or "",
            a.lifetime_gamma_applied,
            a.lifetime_delta_applied,
            a.unused_streak,
            a.utility,
            a.uses,
            o.content,
        ]


#: kind → (header, rows of a namespace as the client may see them)
EXPORTS = {
    "sessions": (SESSION_COLUMNS, session_rows),
    "aggregates": (AGGREGATE_COLUMNS, aggregate_rows),
}
