"""The change feed's events (API.md "The closed loop"), as plain values: which operations are
change events and of which type, what an event carries, and the positions and opaque cursors
consumers resume from. Pure: no Django import; ``rms.changes`` reads pages of them through
``rms.store``, whose PostgreSQL form writes the same events as JSON in SQL, compiled from
``EVENTS`` and ``ENVELOPE`` below and pinned to :func:`event` by ``tests/rms/test_changes.py``.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from rms.policy import DEPRECATED
from rms.replay import iso

# --- event types (API.md): the one definition of what each change event is ------------------
#
# Each event type is one ``EventSpec``: the operation behind it and the fields of its ``data``.
# Everything else is derived from ``EVENTS``: the feed's types, the change operations (and the
# partial indexes over them, ``rms.store.feed``), ``event_type``/``event_data`` here and the SQL
# that writes the same events on PostgreSQL (``rms.store.pgfeed``). Adding an event type is one
# entry below; an entry over a new operation also needs that operation written (``rms.oplog``).

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
OBJECT_ERASED = "object.erased"
WEBHOOK_TEST = "webhook.test"
#: Beyond the v1 list: delivered only to consumers that name it (API.md).
OBJECT_RANKING = "object.ranking"
#: Beyond the v1 list too: a namespace's retrieval profile changed (for the score mirror).
NAMESPACE_PROFILE_CHANGED = "namespace.profile_changed"

#: Where a data field is read from: the operation's ``state`` (the target after the change) or
#: its ``payload`` (what the change was).
STATE = "state"
PAYLOAD = "payload"


@dataclass(frozen=True)
class Copy:
    """``data[key]``: the value of ``key`` in the operation's ``source`` JSON (None if absent)."""

    key: str
    source: str = STATE


@dataclass(frozen=True)
class BetaMean:
    """``data[key]``: the posterior mean α / (α + β) of the state's ``alpha`` and ``beta``;
    None when α is absent or β is absent or 0."""

    key: str = "mean"
    alpha: str = "alpha"
    beta: str = "beta"


Field = Copy | BetaMean


@dataclass(frozen=True)
class EventSpec:
    """One event type: its operation, and its ``data`` fields in order. An operation with
    several types tells them apart by the transition's target state (``SELECTOR``): the spec
    whose ``to`` equals it, else the one with ``to=None``."""

    type: str
    op: str
    data: tuple[Field, ...]
    to: str | None = None


OBJECT_DATA = (
    "confidence",
    "salience_base",
    "epistemic_type",
    "condition_state",
    "decay_profile",
    "pinned",
    "reinforcement_count",
    "version",
    # Added for the score mirror (the ranking inputs object events lacked); never renamed.
    "reinforcement_boost",
    "last_reinforced_at",
)
ALERT_DATA = ("metric", "value", "threshold", "window", "alert_id")

#: An object's state after the change; with the signal for reinforced/penalized; a
#: relationship's posterior; an alert's metric and value (API.md).
OBJECT_FIELDS: tuple[Field, ...] = tuple(Copy(key) for key in OBJECT_DATA)
SIGNAL_FIELDS: tuple[Field, ...] = (
    *OBJECT_FIELDS,
    Copy("signal_type", PAYLOAD),
    Copy("session_id", PAYLOAD),
)
EDGE_FIELDS: tuple[Field, ...] = (Copy("alpha"), Copy("beta"), BetaMean(), Copy("version"))
ALERT_FIELDS: tuple[Field, ...] = tuple(Copy(key, PAYLOAD) for key in ALERT_DATA)
#: An injected object's utility, uses and last use once its session closed, and the version
#: the injection gave it: what the INJECTION_EVENT's payload carries for the score mirror.
RANKING_DATA = ("utility", "uses", "last_use_at", "version")
RANKING_FIELDS: tuple[Field, ...] = tuple(Copy(key, PAYLOAD) for key in RANKING_DATA)
#: An erased object: tells a consumer to erase its copy (docs/DECISIONS.md "Erasure").
ERASED_FIELDS: tuple[Field, ...] = (Copy("subject_kind", PAYLOAD), Copy("erasure_id", PAYLOAD))

#: A namespace's retrieval profile after the change, as ``/rank`` answers it (``profile_out``).
PROFILE_DATA = ("weights", "confidence_floor", "conditions")
PROFILE_FIELDS: tuple[Field, ...] = tuple(Copy(key, PAYLOAD) for key in PROFILE_DATA)

#: The transition's target state: the first non-empty of these (source, key) values.
SELECTOR: tuple[tuple[str, str], ...] = ((PAYLOAD, "to"), (STATE, "epistemic_type"))

EVENTS: tuple[EventSpec, ...] = (
    EventSpec(OBJECT_CREATED, "OBJECT_CREATED", OBJECT_FIELDS),
    EventSpec(OBJECT_REINFORCED, "REINFORCE", SIGNAL_FIELDS),
    EventSpec(OBJECT_PENALIZED, "PENALTY", SIGNAL_FIELDS),
    EventSpec(OBJECT_PINNED, "PIN", OBJECT_FIELDS),
    EventSpec(OBJECT_UNPINNED, "UNPIN", OBJECT_FIELDS),
    EventSpec(OBJECT_TRANSITIONED, "EPISTEMIC_TRANSITION", OBJECT_FIELDS),
    EventSpec(OBJECT_DEPRECATED, "EPISTEMIC_TRANSITION", OBJECT_FIELDS, to=DEPRECATED),
    EventSpec(OBJECT_CONDITION_CHANGED, "CONDITION_CHANGED", OBJECT_FIELDS),
    EventSpec(RELATIONSHIP_CREATED, "EDGE_CREATED", EDGE_FIELDS),
    EventSpec(RELATIONSHIP_EVIDENCE, "EDGE_EVIDENCE", EDGE_FIELDS),
    EventSpec(ALERT_RAISED, "ALERT_RAISED", ALERT_FIELDS),
    EventSpec(ALERT_RESOLVED, "ALERT_RESOLVED", ALERT_FIELDS),
    EventSpec(OBJECT_RANKING, "INJECTION_EVENT", RANKING_FIELDS),
    EventSpec(OBJECT_ERASED, "OBJECT_ERASED", ERASED_FIELDS),
    EventSpec(NAMESPACE_PROFILE_CHANGED, "PROFILE_CHANGED", PROFILE_FIELDS),
)
#: Event types beyond the v1 list: only consumers naming them receive them (API.md "Retrieval,
#: insight, ingestion and lifecycle"); "all" (no ``types``) means the v1 list.
OPT_IN_TYPES: frozenset[str] = frozenset({OBJECT_RANKING, NAMESPACE_PROFILE_CHANGED})

#: The operation behind each feed event type.
TYPE_OPS: dict[str, str] = {spec.type: spec.op for spec in EVENTS}
FEED_TYPES: tuple[str, ...] = tuple(TYPE_OPS)
#: Every event type, including the webhook-only test event.
EVENT_TYPES: tuple[str, ...] = (*FEED_TYPES, WEBHOOK_TEST)
#: The feed types a consumer asking for "all" receives.
V1_TYPES: tuple[str, ...] = tuple(t for t in FEED_TYPES if t not in OPT_IN_TYPES)
#: The operations that are change events (feedback events and checks are facts only;
#: injections are the opt-in ranking event).
CHANGE_OPS: tuple[str, ...] = tuple(sorted(set(TYPE_OPS.values())))
#: The operations behind the v1 types: what "all" reads, and an object's page lists.
V1_CHANGE_OPS: tuple[str, ...] = tuple(sorted({TYPE_OPS[t] for t in V1_TYPES}))
#: The operations that change an object's state (confidence, epistemic type, pin, condition)
#: or create it: every write of those fields goes with one of them, in its transaction (the
#: replay folds exactly these). All are v1 change operations, so the feed's partial indexes hold
#: them (the object statistics rollup finds the objects changed since its run through them).
OBJECT_STATE_OPS: tuple[str, ...] = (
    "CONDITION_CHANGED",
    "EPISTEMIC_TRANSITION",
    "OBJECT_CREATED",
    "PENALTY",
    "PIN",
    "REINFORCE",
    "UNPIN",
)


@dataclass(frozen=True)
class OpShape:
    """What one change operation becomes: its ``data`` fields, and its event type by target
    state (``None``: the type for any other state)."""

    op: str
    data: tuple[Field, ...]
    types: dict[str | None, str]


def _op_shapes(specs: Sequence[EventSpec]) -> dict[str, OpShape]:
    shapes: dict[str, OpShape] = {}
    for spec in specs:
        shape = shapes.setdefault(spec.op, OpShape(spec.op, spec.data, {}))
        if shape.data != spec.data or spec.to in shape.types:
            raise ValueError(f"the event types of {spec.op} must share data and differ by `to`")
        shape.types[spec.to] = spec.type
    for shape in shapes.values():
        if None not in shape.types:
            raise ValueError(f"{shape.op} needs an event type with to=None")
    return shapes


#: Each change operation's shape, in ``EVENTS`` order.
OP_SHAPES: dict[str, OpShape] = _op_shapes(EVENTS)

TARGET_TYPES = {
    "memory_object": "object",
    "relationship": "relationship",
    "namespace": "namespace",
}
#: The keys of every event, in order (API.md); ``event`` and the SQL both build exactly these.
ENVELOPE = ("id", "cursor", "type", "ts", "namespace", "target_type", "target_id", "op_type",
            "data")  # fmt: skip

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
    shape = OP_SHAPES.get(op_type)
    if shape is None:
        return None
    target = transition_target(state, payload) if len(shape.types) > 1 else None
    return shape.types.get(target if isinstance(target, str) else None) or shape.types[None]


def transition_target(state: dict | None, payload: dict | None) -> object:
    """The first non-empty value that ``SELECTOR`` names (None if all are empty)."""
    sources = {STATE: state or {}, PAYLOAD: payload or {}}
    for source, key in SELECTOR:
        value = sources[source].get(key)
        if value:
            return value
    return None


def field_value(field: Field, state: dict, payload: dict) -> object:
    if isinstance(field, Copy):
        return (state if field.source == STATE else payload).get(field.key)
    alpha, beta = state.get(field.alpha), state.get(field.beta)
    return alpha / (alpha + beta) if alpha is not None and beta else None


def event_data(op_type: str, state: dict | None, payload: dict | None) -> dict:
    """``data`` of an event (API.md): the fields its ``EventSpec`` names ({} for an operation
    that is not a change event)."""
    shape = OP_SHAPES.get(op_type)
    if shape is None:
        return {}
    state, payload = state or {}, payload or {}
    return {field.key: field_value(field, state, payload) for field in shape.data}


# --- positions and cursors ----------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Position:
    """A place in the whole log: (transaction id, seq). Valid with any filter."""

    txid: int
    seq: int


START = Position(0, 0)
#: ``txid.seq``, then (cursors issued since deployments have an id) ``.`` and the issuing
#: deployment's id (``rms.deployment``: 16 hex digits).
_CURSOR = re.compile(r"^(\d{1,20})\.(\d{1,20})(?:\.([0-9a-f]{16}))?$")
#: Longest cursor text: base64 of 20 + 1 + 20 + 1 + 16 characters.
_CURSOR_MAX = 80


def encode_cursor(pos: Position, deployment: str | None = None) -> str:
    """The opaque cursor of ``pos``; with ``deployment``, naming the deployment that issued it."""
    text = f"{pos.txid}.{pos.seq}" if deployment is None else f"{pos.txid}.{pos.seq}.{deployment}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def parse_cursor(raw: str | None, field: str = "after") -> tuple[Position, str | None]:
    """The position of a cursor and the id of the deployment that issued it (None for a cursor
    issued before deployments had one); (START, None) when omitted. Anything else malformed is a
    FeedError on ``field``."""
    if raw is None or raw == "":
        return START, None
    try:
        text = base64.urlsafe_b64decode((raw + "=" * (-len(raw) % 4)).encode()).decode("ascii")
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise FeedError(field, "Malformed cursor.") from exc
    match = _CURSOR.match(text)
    if match is None or len(raw) > _CURSOR_MAX:
        raise FeedError(field, "Malformed cursor.")
    txid, seq = int(match.group(1)), int(match.group(2))
    if txid >= 2**63 or seq >= 2**63:
        raise FeedError(field, "Malformed cursor.")
    return Position(txid, seq), match.group(3)


def decode_cursor(raw: str | None) -> Position:
    """The position of a cursor; START when omitted. Anything else malformed is a FeedError."""
    return parse_cursor(raw)[0]


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
    deployment: str | None = None,
) -> dict:
    """The event of one change operation (API.md): the reference form of every feed event;
    its cursor names ``deployment``, the issuing deployment's id."""
    return {
        "id": str(op_id),
        "cursor": encode_cursor(Position(txid, seq), deployment),
        "type": event_type(op_type, state, payload),
        "ts": iso(ts),
        "namespace": namespace,
        "target_type": TARGET_TYPES.get(target_type, target_type),
        "target_id": str(target_id),
        "op_type": op_type,
        "data": event_data(op_type, state, payload),
    }


class FeedRow(NamedTuple):
    """One change operation as the store reads it for a page: its position (``txid``, ``seq``),
    its event type and its event (a dict, or its JSON text where the database wrote it).

    A named tuple, built straight from a database row: a page holds up to a thousand of them
    and uses one position (its last), so ``position`` is made only when asked for."""

    txid: int
    seq: int
    type: str | None
    event: dict | str

    @property
    def position(self) -> Position:
        return Position(self.txid, self.seq)
