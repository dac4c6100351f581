"""The change feed's events (API.md "The closed loop"), as plain values: which operations are
change events and of which type, what an event carries, and the positions and opaque cursors
consumers resume from. Pure: no Django import; ``rms.changes`` reads pages of them through
``rms.store``, whose PostgreSQL form writes the same events as JSON in SQL (generated from the
tables below and pinned to :func:`event` by ``tests/rms/test_changes.py``).
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rms.policy import DEPRECATED
from rms.replay import iso

# --- event types (API.md): one place maps operations to them --------------------------------

OBJECT_CREATED = "object.created"
OBJECT_REINFORCED = "object.reinforced"
OBJECT_PENALIZED = "object.penalized"
OBJECT_PINNED = "object.pinned"
OBJECT_UNPINNED = "object.unpinned"
OBJECT_TRANSITIONED = "object.transitioned"
OBJECT_DEPRECATED = "object.deprecated"
OBJECT_CONDITION_CHANGED = "object.condition_changed"
RELATIONSHIP_CREATED = "relationship.created"
RELATIONSHIP_EVIDENCE = "relationship.evidence"
ALERT_RAISED = "alert.raised"
ALERT_RESOLVED = "alert.resolved"
WEBHOOK_TEST = "webhook.test"

#: The operation behind each feed event type.
TYPE_OPS: dict[str, str] = {
    OBJECT_CREATED: "OBJECT_CREATED",
    OBJECT_REINFORCED: "REINFORCE",
    OBJECT_PENALIZED: "PENALTY",
    OBJECT_PINNED: "PIN",
    OBJECT_UNPINNED: "UNPIN",
    OBJECT_TRANSITIONED: "EPISTEMIC_TRANSITION",
    OBJECT_DEPRECATED: "EPISTEMIC_TRANSITION",
    OBJECT_CONDITION_CHANGED: "CONDITION_CHANGED",
    RELATIONSHIP_CREATED: "EDGE_CREATED",
    RELATIONSHIP_EVIDENCE: "EDGE_EVIDENCE",
    ALERT_RAISED: "ALERT_RAISED",
    ALERT_RESOLVED: "ALERT_RESOLVED",
}
FEED_TYPES: tuple[str, ...] = tuple(TYPE_OPS)
#: Every event type, including the webhook-only test event.
EVENT_TYPES: tuple[str, ...] = (*FEED_TYPES, WEBHOOK_TEST)
#: Each change operation's type (EPISTEMIC_TRANSITION has two, told apart by its target state).
_OP_TYPES = {op: type_ for type_, op in TYPE_OPS.items() if op != "EPISTEMIC_TRANSITION"}
#: The operations that are change events (injections, feedback events, checks are facts only).
CHANGE_OPS: tuple[str, ...] = tuple(sorted(set(TYPE_OPS.values())))

TARGET_TYPES = {
    "memory_object": "object",
    "relationship": "relationship",
    "namespace": "namespace",
}
OBJECT_DATA = (
    "confidence",
    "salience_base",
    "epistemic_type",
    "condition_state",
    "decay_profile",
    "pinned",
    "reinforcement_count",
    "version",
)
ALERT_DATA = ("metric", "value", "threshold", "window", "alert_id")

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


class FeedError(ValueError):
    """A malformed cursor or an unknown event type: the caller's mistake (a 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def event_type(op_type: str, state: dict | None, payload: dict | None) -> str | None:
    """The feed type of an operation, or None for operations that are not change events."""
    if op_type == "EPISTEMIC_TRANSITION":
        to = (payload or {}).get("to") or (state or {}).get("epistemic_type")
        return OBJECT_DEPRECATED if to == DEPRECATED else OBJECT_TRANSITIONED
    return _OP_TYPES.get(op_type)


def event_data(op_type: str, state: dict | None, payload: dict | None) -> dict:
    """``data`` of an event (API.md): an object's state after the change (plus the signal for
    reinforced/penalized), a relationship's posterior, an alert's metric and value."""
    state = state or {}
    payload = payload or {}
    if op_type in ("EDGE_CREATED", "EDGE_EVIDENCE"):
        alpha, beta = state.get("alpha"), state.get("beta")
        mean = alpha / (alpha + beta) if alpha is not None and beta else None
        return {"alpha": alpha, "beta": beta, "mean": mean, "version": state.get("version")}
    if op_type in ("ALERT_RAISED", "ALERT_RESOLVED"):
        return {key: payload.get(key) for key in ALERT_DATA}
    data = {key: state.get(key) for key in OBJECT_DATA}
    if op_type in ("REINFORCE", "PENALTY"):
        data["signal_type"] = payload.get("signal_type")
        data["session_id"] = payload.get("session_id")
    return data


# --- positions and cursors ----------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """A place in the whole log: (transaction id, seq). Valid with any filter."""

    txid: int
    seq: int


START = Position(0, 0)
_CURSOR = re.compile(r"^(\d{1,20})\.(\d{1,20})$")


def encode_cursor(pos: Position) -> str:
    return base64.urlsafe_b64encode(f"{pos.txid}.{pos.seq}".encode()).decode().rstrip("=")


def decode_cursor(raw: str | None) -> Position:
    """The position of a cursor; START when omitted. Anything else malformed is a FeedError."""
    if raw is None or raw == "":
        return START
    try:
        text = base64.urlsafe_b64decode((raw + "=" * (-len(raw) % 4)).encode()).decode("ascii")
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise FeedError("after", "Malformed cursor.") from exc
    match = _CURSOR.match(text)
    if match is None or len(raw) > 64:
        raise FeedError("after", "Malformed cursor.")
    txid, seq = int(match.group(1)), int(match.group(2))
    if txid >= 2**63 or seq >= 2**63:
        raise FeedError("after", "Malformed cursor.")
    return Position(txid, seq)


def parse_types(raw: str | Iterable[str] | None, *, allowed: Sequence[str] = FEED_TYPES):
    """``types=a,b`` as a frozenset (None for all); an unknown type is a FeedError."""
    if raw is None or raw == "":
        return None
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    names = [item.strip() for item in items if item.strip()]
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise FeedError("types", f"Unknown event type(s): {', '.join(unknown)}.")
    return frozenset(names) or None


def event(
    *,
    seq: int,
    txid: int,
    op_id: uuid.UUID,
    ts: datetime,
    op_type: str,
    target_type: str,
    target_id: uuid.UUID,
    namespace: str,
    payload: dict | None,
    state: dict | None,
) -> dict:
    """The event of one change operation (API.md): the reference form of every feed event."""
    return {
        "id": str(op_id),
        "cursor": encode_cursor(Position(txid, seq)),
        "type": event_type(op_type, state, payload),
        "ts": iso(ts),
        "namespace": namespace,
        "target_type": TARGET_TYPES.get(target_type, target_type),
        "target_id": str(target_id),
        "op_type": op_type,
        "data": event_data(op_type, state, payload),
    }


@dataclass(frozen=True)
class FeedRow:
    """One change operation as the store reads it for a page: its position, its event type and
    its event (a dict, or its JSON text where the database wrote it)."""

    position: Position
    type: str | None
    event: dict | str
