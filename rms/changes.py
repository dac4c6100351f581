"""The change feed (API.md "The closed loop"): the operation log's state-changing operations as
events, in a stable order, released only when no earlier one can still commit.

The log is the outbox: nothing is written for the feed on the ingestion path. What an event is
(its type, its data, its cursor) is ``rms.events``; how a page is read and what may be released
is the store's (``rms.store.pgfeed`` on PostgreSQL: ``(txid, seq)`` order under the transaction
horizon; ``rms.store.feed`` elsewhere). Why that is exactly-once (docs/DECISIONS.md has the
proof in full):

- every transaction with an id below the horizon has committed or aborted, so the set of rows
  with ``txid`` below it can never change again;
- a row that commits later belongs to a transaction that was running (or had not started) at the
  read, so its ``txid`` is at or above the horizon, hence above every position already released.

``seq`` alone cannot be the cursor: it is drawn before commit, so seq 101 can commit (and be
read) before seq 100. Positions cross the API as opaque cursors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from rms import deployment, store
from rms.errors import DomainError
from rms.events import (
    DEFAULT_LIMIT,
    START,
    TYPE_OPS,
    V1_CHANGE_OPS,
    FeedError,
    Position,
    encode_cursor,
    event_data,
    event_type,
    parse_cursor,
)


@dataclass(frozen=True)
class Page:
    events: list[dict] | list[str]
    next: Position
    has_more: bool


def _head(after: Position, below: int) -> Position:
    """The last released change position (any namespace, any type), or ``after`` if later: where
    a consumer whose filter matched nothing may resume, so its next read does not rescan what it
    skipped."""
    last = store.get().change_head(below)
    return max(after, last) if last is not None else after


def read(
    after: Position = START,
    *,
    limit: int = DEFAULT_LIMIT,
    namespaces: Sequence[str] | None = None,
    types: frozenset[str] | None = None,
    as_json: bool = False,
) -> Page:
    """One page of events after ``after`` (namespaces None: all; types None: the v1 types, not
    the opt-in ones such as the ranking event);
    with ``as_json`` the events are their JSON texts.

    ``next`` is the last returned event's position; when the page is not full it is the last
    released position of the whole log, so it may move past events the filter excludes. The
    bound is read first and limits both the page and the head, so a write that commits between
    the two reads is left for the next page, never skipped.
    """
    if namespaces is not None and not namespaces:
        return Page([], after, False)
    db = store.get()
    below = db.release_bound()
    op_types = sorted({TYPE_OPS[t] for t in types}) if types else list(V1_CHANGE_OPS)
    rows = db.change_rows(
        after,
        below=below,
        limit=limit + 1,
        op_types=op_types,
        namespaces=namespaces,
        as_json=as_json,
        deployment=deployment.current(),
    )
    has_more = len(rows) > limit
    rows = rows[:limit]
    # EPISTEMIC_TRANSITION is two types (transitioned, deprecated): the operation filter above
    # reads both, this keeps the ones asked for.
    events = [row.event for row in rows if not types or row.type in types]
    if as_json:
        events = [e if isinstance(e, str) else json.dumps(e, separators=(",", ":")) for e in events]
    last = rows[-1].position if rows else after
    nxt = last if has_more else _head(last, below)
    return Page(events, nxt, has_more)


#: The error code of a cursor another deployment issued.
FOREIGN_CURSOR = "foreign_cursor"


def cursor(pos: Position) -> str:
    """The cursor of ``pos`` as this deployment hands it out: naming this deployment."""
    return encode_cursor(pos, deployment.current())


def position(raw: str | None, field: str = "after") -> Position:
    """The position of a cursor a consumer sent back (START when omitted): a FeedError on
    ``field`` when it is malformed or ahead of this log; a DomainError ``foreign_cursor``
    (400, its own code: the cursor is well formed, just not this deployment's) when another
    deployment issued it. A cursor issued before deployments had an id names none and is
    taken as it was (the ahead-of-the-log check is all that can refuse it)."""
    pos, issuer = parse_cursor(raw, field)
    if issuer is not None and issuer != deployment.current():
        message = (
            "Cursor was issued by another deployment of this service (another database), "
            "not by this one: start again from this deployment's snapshot or feed."
        )
        raise DomainError(FOREIGN_CURSOR, message, 400, {field: [message]})
    check_issued(pos, field)
    return pos


def check_issued(after: Position, field: str = "after") -> None:
    """A FeedError when ``after`` lies ahead of everything this log has released: a cursor
    from another deployment (or a database restored to an earlier point). Reading from it
    would wait for events that are not coming, or skip some."""
    if after == START:
        return
    db = store.get()
    if not db.position_issued(after, db.release_bound()):
        raise FeedError(
            field, "Cursor is ahead of this change feed: it was not issued by this deployment."
        )


def head() -> Position:
    """The last released position of the whole log: a consumer starting here receives exactly
    the events released after now (a new webhook endpoint, a re-enabled one)."""
    return _head(START, store.get().release_bound())


def target_events(target_id, *, limit: int = 200, newest_first: bool = False) -> list[dict]:
    """The change events of one target, oldest (or newest) first, for an object's page:
    committed rows only, read without the release horizon because nothing here is a cursor."""
    from rms.models import Operation

    ops = (
        Operation.objects.filter(target_id=target_id, op_type__in=V1_CHANGE_OPS)
        .order_by("-seq" if newest_first else "seq")
        .values("seq", "id", "ts", "op_type", "payload", "state")[:limit]
    )
    return [
        {
            "id": str(op["id"]),
            "seq": op["seq"],
            "type": event_type(op["op_type"], op["state"], op["payload"]),
            "ts": op["ts"],
            "op_type": op["op_type"],
            "data": event_data(op["op_type"], op["state"], op["payload"]),
        }
        for op in ops
    ]
