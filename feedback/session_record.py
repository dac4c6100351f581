"""A feedback session's record (API.md), rebuilt from its FEEDBACK_SESSION operation.

The operation's payload is the record without ``id`` and ``ts`` (those are the session row's
key and time) and with ``context_text`` (planner ``_close_session``), so the row no longer stores
the record a second time (docs/DECISIONS.md "Disk per session"). A row keeps a stored record
when it has one: written before, or redacted by an erasure whose rule changed it (the erasure
stores what the reader must see, whatever became of the operation).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rms.replay import iso

SESSION_OP = "FEEDBACK_SESSION"

#: The record's keys, in the order the planner writes them.
KEYS = (
    "id", "session_id", "request_id", "ts", "namespace_scope", "context_budget", "tokens_used",
    "context_tags", "outcome", "injected_object_ids", "signals", "unused_ids", "session_str_mean",
)  # fmt: skip


def from_payload(session_pk: Any, ts: datetime, payload: dict) -> dict:
    """The record of the session ``session_pk`` at ``ts`` whose FEEDBACK_SESSION payload this is."""
    own = {"id": str(session_pk), "ts": iso(ts)}
    return {k: own[k] if k in own else payload.get(k) for k in KEYS}


def fill(sessions: Iterable) -> None:
    """Give every ``FeedbackSession`` here without a stored record its rebuilt one (cached on
    the instance): one query for all of them, none when each has its own."""
    from rms.models import Operation

    missing = {s.pk: s for s in sessions if s.stored_record is None and s.rebuilt is None}
    if not missing:
        return
    rows = Operation.objects.filter(target_id__in=list(missing), op_type=SESSION_OP)
    for target_id, payload in rows.values_list("target_id", "payload"):
        s = missing[target_id]
        s.rebuilt = from_payload(s.pk, s.ts, payload)
