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

from rms import store
from rms.events import (
    DEFAULT_LIMIT,
    START,
    TYPE_OPS,
    V1_CHANGE_OPS,
    FeedError,
    Position,
    event_data,
    event_type,
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


def check_issued(after: Position) -> None:
    """A FeedError when ``after`` lies ahead of everything this log has released: a cursor
    from another deployment (or a database restored to an earlier point). Reading from it
    would wait for events that are not coming, or skip some."""
    if after == START:
        return
    db = store.get()
    if not db.position_issued(after, db.release_bound()):
        raise FeedError(
            "after", "Cursor is ahead of this change feed: it was not issued by this deployment."
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
