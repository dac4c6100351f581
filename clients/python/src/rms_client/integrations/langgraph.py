"""LangGraph's long-term memory store, ranked and kept current by the feedback loop
(``pip install 'rms-client[langgraph]'``).

``RMSStore(inner=..., mirror=...)`` is a ``langgraph.store.base.BaseStore`` wrapping another
store. Items that are memories carry the RMS object id in ``value["rms_object_id"]``.

- ``search`` over-fetches from ``inner``, drops objects the namespace's retrieval profile makes
  ineligible, and re-ranks the rest with ``mirror.rank`` (the score ``/rank`` gives; similarity
  is the inner store's search score when it has one, else rank-derived, see
  ``rms_client.integrations.rerank``). A ranked item's ``score`` becomes its RMS score; items
  without an object id follow, unranked. Every other operation goes to ``inner`` unchanged.
- ``sync(client, namespace=...)`` follows the change feed and applies each object event to the
  items carrying that object: a deprecated memory is deleted (``on_deprecated="delete"``) or
  kept and marked (``"mark"``); confidence, status (the epistemic type), condition state,
  pinned and the object's version are written into the item as ``rms_confidence``,
  ``rms_status``, ``rms_condition_state``, ``rms_pinned`` and ``rms_version``.

Exactly once through restarts: an item's ``rms_version`` is written in the same put as the
change, and an event whose ``data.version`` is not newer than the item's is skipped, so a
replayed event changes nothing; the feed cursor is stored in ``inner`` itself, under the
reserved namespace ``("rms_sync", <namespace>)``, after each event, so a restart resumes where
the last run stopped (at worst replaying the one event it was applying, which the version
check skips). With a persistent inner store both survive a kill.

For any other store, write the same ``apply(event)``: find the records of
``event["target_id"]``, skip those whose stored version is ``>= event["data"]["version"]``, and
write the new state together with that version in one write (delete on ``object.deprecated``
if you prefer); store the event's ``cursor`` after it, and resume ``client.changes(after=...)``
from the stored cursor. ``RMSStore.apply`` below is that recipe for a BaseStore.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        Item,
        ListNamespacesOp,
        Op,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "rms_client.integrations.langgraph needs langgraph: pip install 'rms-client[langgraph]'"
    ) from exc

from rms_client.integrations.rerank import clock_value, rerank

OBJECT_ID_KEY = "rms_object_id"
#: The feed's object event types the sync applies (a consumer naming them gets only these).
OBJECT_EVENTS = (
    "object.created",
    "object.reinforced",
    "object.penalized",
    "object.pinned",
    "object.unpinned",
    "object.transitioned",
    "object.deprecated",
    "object.condition_changed",
)
DEPRECATED_EVENT = "object.deprecated"
#: Item value keys the sync writes, from the event's ``data``.
WRITTEN = {
    "rms_confidence": "confidence",
    "rms_status": "epistemic_type",
    "rms_condition_state": "condition_state",
    "rms_pinned": "pinned",
    "rms_version": "version",
}
STATE_PREFIX = "rms_sync"
CURSOR_KEY = "cursor"
ON_DEPRECATED = ("delete", "mark")


class RMSStore(BaseStore):
    """A BaseStore whose searches rank with the feedback loop and whose items follow its
    decisions. ``mirror`` may be None for a store that only syncs (searches pass through)."""

    def __init__(
        self,
        inner: BaseStore,
        mirror: Any = None,
        *,
        fetch_factor: int = 4,
        on_deprecated: str = "delete",
        clock: Callable[[], datetime] | None = None,
        wait: float = 5.0,
    ) -> None:
        if on_deprecated not in ON_DEPRECATED:
            raise ValueError(f"on_deprecated must be one of {ON_DEPRECATED}.")
        if fetch_factor < 1:
            raise ValueError("fetch_factor must be at least 1.")
        self.inner = inner
        self.mirror = mirror
        self.fetch_factor = fetch_factor
        self.on_deprecated = on_deprecated
        self.clock = clock
        self.wait = wait
        self.supports_ttl = inner.supports_ttl
        self.ttl_config = inner.ttl_config
        self._closed = threading.Event()
        self.applied = 0  # item writes/deletes this process made from events

    # --- the BaseStore interface -------------------------------------------------------------

    def _widen(self, ops: list[Op]) -> list[Op]:
        out: list[Op] = []
        for op in ops:
            if isinstance(op, SearchOp) and self.mirror is not None:
                # Over-fetch from the start: the re-ranking may move any hit into the window.
                op = op._replace(limit=(op.offset + op.limit) * self.fetch_factor, offset=0)
            out.append(op)
        return out

    def _finish(self, ops: list[Op], results: list[Result]) -> list[Result]:
        out: list[Result] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(op, SearchOp):
                items = [i for i in result if not _reserved(i.namespace)]
                if self.mirror is not None:
                    items = self._rerank(items)[op.offset : op.offset + op.limit]
                result = items
            elif isinstance(op, ListNamespacesOp):
                result = [ns for ns in result if not _reserved(ns)]
            out.append(result)
        return out

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._finish(ops, self.inner.batch(self._widen(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self._finish(ops, await self.inner.abatch(self._widen(ops)))

    def _rerank(self, items: list[SearchItem]) -> list[SearchItem]:
        hits = [((i.value or {}).get(OBJECT_ID_KEY), i.score) for i in items]
        out = []
        for p in rerank(hits, self.mirror, now=clock_value(self.clock)):
            item = items[p.index]
            score = p.score if p.score is not None else item.score
            out.append(
                SearchItem(
                    item.namespace, item.key, item.value, item.created_at, item.updated_at, score
                )
            )
        return out

    # --- the sync ----------------------------------------------------------------------------

    @staticmethod
    def state_namespace(namespace: str) -> tuple[str, ...]:
        return (STATE_PREFIX, namespace)

    def load_cursor(self, namespace: str) -> str | None:
        item = self.inner.get(self.state_namespace(namespace), CURSOR_KEY)
        return (item.value or {}).get("cursor") if item is not None else None

    def save_cursor(self, namespace: str, cursor: str) -> None:
        self.inner.put(self.state_namespace(namespace), CURSOR_KEY, {"cursor": cursor}, index=False)

    def items_of(self, object_id: str) -> list[Item]:
        """Every item of ``inner`` carrying ``object_id`` (the reserved namespace excluded)."""
        found: list[Item] = []
        offset, page = 0, 100
        while True:
            batch = self.inner.search(
                (), filter={OBJECT_ID_KEY: object_id}, limit=page, offset=offset
            )
            found.extend(i for i in batch if not _reserved(i.namespace))
            if len(batch) < page:
                return found
            offset += page

    def apply(self, event: dict) -> int:
        """Apply one change event to ``inner``; the number of items written or deleted (0 for
        an event already applied, or about an object no item carries). Idempotent: see the
        module's docstring for the recipe."""
        if event.get("target_type") != "object" or event.get("type") not in OBJECT_EVENTS:
            return 0
        data = event.get("data") or {}
        version = data.get("version")
        changed = 0
        for item in self.items_of(str(event["target_id"])):
            value = dict(item.value)
            if version is not None and (value.get("rms_version") or 0) >= version:
                continue
            if event["type"] == DEPRECATED_EVENT and self.on_deprecated == "delete":
                self.inner.delete(item.namespace, item.key)
            else:
                value.update({key: data.get(field) for key, field in WRITTEN.items()})
                self.inner.put(item.namespace, item.key, value)
            changed += 1
        self.applied += changed
        return changed

    def sync(
        self,
        client: Any,
        *,
        namespace: str,
        once: bool = False,
        limit: int = 100,
        on_event: Callable[[dict, int], None] | None = None,
    ) -> int:
        """Follow ``/changes`` for ``namespace`` from the stored cursor, applying each object
        event, until ``close()`` (``once=True``: until the feed's head, then return). Returns
        the number of events read. ``on_event(event, changed)`` is called after each one."""
        cursor = self.load_cursor(namespace)
        read = 0
        while not self._closed.is_set():
            page = client.changes_page(
                namespace=namespace,
                after=cursor,
                types=OBJECT_EVENTS,
                limit=limit,
                wait=0 if once else self.wait,
            )
            for event in page["results"]:
                changed = self.apply(event)
                cursor = event["cursor"]
                self.save_cursor(namespace, cursor)
                read += 1
                if on_event is not None:
                    on_event(event, changed)
            if page.get("next_cursor") and page["next_cursor"] != cursor:
                cursor = page["next_cursor"]
                self.save_cursor(namespace, cursor)
            if once and not page.get("has_more"):
                break
        return read

    def close(self) -> None:
        """Stop a running ``sync`` (after its current long poll)."""
        self._closed.set()

    def __enter__(self) -> RMSStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reserved(namespace: tuple[str, ...]) -> bool:
    return bool(namespace) and namespace[0] == STATE_PREFIX
