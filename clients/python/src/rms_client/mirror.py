"""The local score mirror (CLIENT.md "The retrieval side"): every object of one namespace with
its ranking inputs, in the agent's process, so ``rank`` answers what ``POST /rank`` would at the
same feed position and clock, with no network call.

Bootstrap: ``GET /ranking-state`` page by page (the snapshot and the feed cursor it is exact
at), or the ``state_file`` a previous run left. Then one background thread long-polls
``/changes`` after that cursor, naming the event types it needs (object events and the opt-in
``object.ranking`` and ``namespace.profile_changed``: a new retrieval profile is applied from
its feed position on, every object's derived columns recomputed with it). Each object event
is applied once by version: it carries the object's version after it, and the mirror keeps,
per object, the version its state came from and the version its ranking aggregates came from;
an event at or below the one held is already reflected (the snapshot may have read it), so
applying twice or out of order cannot go wrong.

Cursors are opaque: a page read from cursor ``c`` is applied, and the mirror moved to its
``next_cursor``, only if the mirror is still at ``c`` (the thread, ``wait_until_current`` and
``refresh`` all read pages), so no cursor is ever parsed or compared for order. A cursor the
server refuses (another deployment's, say, from an old state file) stops the thread with a
clear error; the mirror keeps answering from its last good state, and ``refresh()`` starts
again from the snapshot. A mirror resumed from a state file follows the types the file
recorded plus every type this code applies, so a file written before a type existed still
receives it.

Speed: ``rank`` reads columns precomputed when an event is applied (the constant part of the
score, the hotness factor, its reference time in integer microseconds), so a call does one
``exp`` per candidate and no datetime work but reading ``now``. The formula is
``rms_client.scoring``'s (the server's, pinned to it); the service's tests pin this faster form
to it to 1e-12. Memory: one dict entry per object and typed arrays (``array``), no object per
row.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from array import array
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import rms_client.scoring as scoring
from rms_client.errors import RMSError, RMSValidationError

log = logging.getLogger("rms_client")

UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: "No time" in an integer-microsecond column.
NONE_TS = -(2**63)
_US_PER_DAY = 86400e6
#: Hotness's rate per microsecond (SPEC §12: halves every 7 days).
_HOT_K = math.log(2) / scoring.HOTNESS_HALF_LIFE_DAYS / _US_PER_DAY

#: Eligibility codes, and the reason each answers.
ELIGIBLE, _DEPRECATED, _CONDITION, _FLOOR = 0, 1, 2, 3
REASONS = (None, scoring.REASON_DEPRECATED, scoring.REASON_CONDITION, scoring.REASON_FLOOR)
_REASON_CODE = {reason: code for code, reason in enumerate(REASONS)}

#: The event types a mirror follows (the snapshot names them too; these are the fallback).
MIRROR_TYPES = (
    "object.created",
    "object.reinforced",
    "object.penalized",
    "object.pinned",
    "object.unpinned",
    "object.transitioned",
    "object.deprecated",
    "object.condition_changed",
    "object.ranking",
    "object.erased",
    "namespace.profile_changed",
)
RANKING_EVENT = "object.ranking"
#: The server's code for a feed cursor another deployment issued.
FOREIGN_CURSOR = "foreign_cursor"
PROFILE_EVENT = "namespace.profile_changed"
#: Object fields a state event may carry, and where they go.
_STATE_FLOATS = ("confidence", "salience_base", "reinforcement_boost")
STATE_FORMAT = 1
#: A persisted object row: ``Mirror.get``'s keys, with the two versions the mirror keeps.
FILE_COLUMNS = (
    "object_id", "version_state", "version_ranking", "epistemic_type", "condition_state",
    "confidence", "salience_base", "reinforcement_boost", "decay_profile", "pinned",
    "last_reinforced_at", "created_at", "utility", "uses", "last_use_at",
)  # fmt: skip


#: A whole ``/ranking-state`` snapshot: every row, and the last page (profile, event types,
#: feed cursor).
Snapshot = tuple[list[dict], dict]
DEFAULT_PAGE_SIZE = 1000


def read_snapshot(client: Any, namespace: str, page_size: int = DEFAULT_PAGE_SIZE) -> Snapshot:
    """Every page of ``GET /ranking-state`` through a blocking client."""
    rows: list[dict] = []
    cursor = None
    while True:
        page = client.ranking_state(namespace, cursor=cursor, page_size=page_size)
        rows.extend(page["results"])
        cursor = page.get("next_cursor")
        if not cursor:
            return rows, page


async def aread_snapshot(
    client: Any, namespace: str, page_size: int = DEFAULT_PAGE_SIZE
) -> Snapshot:
    """``read_snapshot`` through an ``AsyncRMSClient``."""
    rows: list[dict] = []
    cursor = None
    while True:
        page = await client.ranking_state(namespace, cursor=cursor, page_size=page_size)
        rows.extend(page["results"])
        cursor = page.get("next_cursor")
        if not cursor:
            return rows, page


def to_us(value: datetime | str | None) -> int:
    """A time as integer microseconds since the epoch (NONE_TS for None)."""
    if value is None:
        return NONE_TS
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise RMSValidationError("Times must be timezone-aware.")
    return (value - _EPOCH) // _US


def from_us(value: int) -> datetime | None:
    return None if value == NONE_TS else _EPOCH + timedelta(microseconds=value)


class Mirror:
    """See the module docstring. Build it with ``client.mirror(namespace, state_file=None)``."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        state_file: str | os.PathLike | None = None,
        *,
        wait: float = 2.0,
        page_size: int = DEFAULT_PAGE_SIZE,
        save_interval: float = 5.0,
        start: bool = True,
        snapshot: Snapshot | None = None,
        owns_client: bool = False,
    ) -> None:
        """``snapshot`` (rows and last page, as ``read_snapshot`` returns them) is used
        instead of reading one when there is no state file to resume from; ``owns_client``:
        ``close()`` closes ``client`` too."""
        self._client = client
        self.namespace = namespace
        self.state_file = os.fspath(state_file) if state_file is not None else None
        self._wait = wait
        self._page_size = page_size
        self._save_interval = save_interval
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: RMSError | None = None
        self._last_save = 0.0
        self._dirty = False
        self._reset()
        self._owns_client = owns_client
        self._follows = False
        loaded = self.state_file is not None and self._load_file()
        if not loaded:
            if snapshot is not None:
                self._install(snapshot)
            else:
                self.refresh()
        self._follows = start
        self._start()

    @classmethod
    def from_snapshot(cls, namespace: str, snapshot: Mapping[str, Any]) -> Mirror:
        """A mirror that follows nothing, built from one ``/ranking-state`` answer (all its
        rows): for tests, benchmarks and offline ranking."""
        self = cls.__new__(cls)
        self._client, self.namespace, self.state_file = None, namespace, None
        self._wait, self._page_size, self._save_interval = 0.0, 0, 0.0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread, self.error, self._last_save, self._dirty = None, None, 0.0, False
        self._follows = self._owns_client = False
        self._reset()
        self._profile = scoring.profile_from_out(snapshot["profile"])
        self.event_types = tuple(snapshot.get("event_types") or MIRROR_TYPES)
        for row in snapshot["results"]:
            self._put_row(row)
        self._cursor = snapshot.get("feed_cursor")
        return self

    # --- storage ---------------------------------------------------------------------------

    def _reset(self) -> None:
        self._index: dict[str, int] = {}
        self._free: list[int] = []
        self._names: list[str | None] = [None]
        self._codes: dict[str | None, int] = {None: 0}
        # Inputs, as received.
        self._conf = array("d")
        self._sal = array("d")
        self._boost = array("d")
        self._util = array("d")
        self._uses = array("q")
        self._vstate = array("q")
        self._vrank = array("q")
        self._created = array("q")
        self._reinforced = array("q")
        self._used = array("q")
        self._etype = array("B")
        self._cond = array("B")
        self._decay = array("B")
        self._pinned = array("B")
        # Derived at apply time for ``rank``.
        self._elig = array("B")
        self._const = array("d")
        self._hot = array("d")
        self._hot_since = array("q")
        self._cursor: str | None = None
        self._profile = scoring.Profile()
        self.event_types: tuple[str, ...] = MIRROR_TYPES
        self._recorded_types: tuple[str, ...] | None = None

    def _code(self, name: str | None) -> int:
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self._names)
            self._names.append(name)
        return code

    def _slot(self, object_id: str) -> int:
        i = self._index.get(object_id)
        if i is not None:
            return i
        if self._free:
            i = self._free.pop()
        else:
            i = len(self._conf)
            for column, blank in self._columns():
                column.append(blank)
        self._index[object_id] = i
        return i

    def _columns(self):
        return (
            (self._conf, 0.0), (self._sal, 0.0), (self._boost, 0.0), (self._util, 0.5),
            (self._uses, 0), (self._vstate, -1), (self._vrank, -1), (self._created, NONE_TS),
            (self._reinforced, NONE_TS), (self._used, NONE_TS), (self._etype, 0),
            (self._cond, 0), (self._decay, 0), (self._pinned, 0), (self._elig, 0),
            (self._const, 0.0), (self._hot, 0.0), (self._hot_since, NONE_TS),
        )  # fmt: skip

    def _derive(self, i: int) -> None:
        """The columns ``rank`` reads, from object ``i``'s inputs and the profile."""
        p = self._profile
        etype, cond = self._names[self._etype[i]], self._names[self._cond[i]]
        conf = self._conf[i]
        if etype == scoring.DEPRECATED:
            elig = _DEPRECATED
        elif (
            etype == scoring.CONDITIONAL
            and p.conditions != "any"
            and (cond != "TRUE" if p.conditions == "met" else cond in scoring.REFUTED)
        ):
            elig = _CONDITION
        elif conf < p.confidence_floor:
            elig = _FLOOR
        else:
            elig = ELIGIBLE
        self._elig[i] = elig
        uses = self._uses[i]
        self._hot[i] = p.hotness * ((1 + uses) / (2 + uses))
        self._const[i] = p.utility * self._util[i] + p.confidence * conf
        used = self._used[i]
        self._hot_since[i] = used if used != NONE_TS else self._created[i]

    def _put_row(self, row: Mapping[str, Any]) -> None:
        """One snapshot row (``GET /ranking-state``) or persisted row."""
        i = self._slot(str(row["object_id"]))
        self._conf[i] = float(row["confidence"])
        self._sal[i] = float(row["salience_base"])
        self._boost[i] = float(row["reinforcement_boost"])
        self._util[i] = float(row["utility"])
        self._uses[i] = int(row["uses"])
        self._vstate[i] = self._vrank[i] = int(row["version"])
        self._created[i] = to_us(row["created_at"])
        self._reinforced[i] = to_us(row["last_reinforced_at"])
        self._used[i] = to_us(row["last_use_at"])
        self._etype[i] = self._code(row["epistemic_type"])
        self._cond[i] = self._code(row["condition_state"])
        self._decay[i] = self._code(row["decay_profile"])
        self._pinned[i] = 1 if row["pinned"] else 0
        self._derive(i)

    def _row(self, object_id: str, i: int) -> dict:
        return {
            "object_id": object_id,
            "version": max(self._vstate[i], self._vrank[i]),
            "epistemic_type": self._names[self._etype[i]],
            "condition_state": self._names[self._cond[i]],
            "confidence": self._conf[i],
            "salience_base": self._sal[i],
            "reinforcement_boost": self._boost[i],
            "decay_profile": self._names[self._decay[i]],
            "pinned": bool(self._pinned[i]),
            "last_reinforced_at": from_us(self._reinforced[i]),
            "created_at": from_us(self._created[i]),
            "utility": self._util[i],
            "uses": self._uses[i],
            "last_use_at": from_us(self._used[i]),
        }

    # --- events ----------------------------------------------------------------------------

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """Apply one feed event if it is newer than what the mirror holds; True if applied."""
        if event.get("namespace") != self.namespace:
            return False
        if event.get("type") == PROFILE_EVENT:
            # The whole profile after the change; events come in feed order, so the last wins.
            self._profile = scoring.profile_from_out(event.get("data") or {})
            for i in self._index.values():
                self._derive(i)
            return True
        if event.get("target_type") != "object":
            return False
        kind, data, oid = event.get("type"), event.get("data") or {}, event.get("target_id")
        if kind == "object.erased":
            i = self._index.pop(oid, None)
            if i is not None:
                self._free.append(i)
            return i is not None
        version = data.get("version")
        if not isinstance(version, int):
            return False
        i = self._index.get(oid)
        if kind == RANKING_EVENT:
            if i is None or version <= self._vrank[i] or data.get("utility") is None:
                return False
            self._util[i] = float(data["utility"])
            self._uses[i] = int(data["uses"])
            self._used[i] = to_us(data.get("last_use_at"))
            self._vrank[i] = version
        else:
            if i is None:
                if kind != "object.created":
                    return False  # an object the snapshot did not have and not created since
                i = self._slot(oid)
                self._created[i] = to_us(event["ts"])  # created_at is the creation's time
            elif version <= self._vstate[i]:
                return False
            for name, column in zip(
                _STATE_FLOATS, (self._conf, self._sal, self._boost), strict=True
            ):
                if data.get(name) is not None:
                    column[i] = float(data[name])
            self._etype[i] = self._code(data.get("epistemic_type"))
            self._cond[i] = self._code(data.get("condition_state"))
            self._decay[i] = self._code(data.get("decay_profile"))
            self._pinned[i] = 1 if data.get("pinned") else 0
            self._reinforced[i] = to_us(data.get("last_reinforced_at"))
            self._vstate[i] = version
        self._derive(i)
        return True

    def _apply_page(self, after: str | None, page: Mapping[str, Any]) -> bool:
        """Apply a page read from ``after`` and move to its ``next_cursor``, if the mirror is
        still at ``after``; False (nothing done) when another reader (the thread,
        ``wait_until_current``, ``refresh``) moved it meanwhile: the page's events are then
        applied already or come again from the new cursor. Cursors stay opaque: the mirror
        never compares two positions."""
        with self._lock:
            if self._cursor != after:
                return False
            for event in page["results"]:
                self._apply(event)
            self._cursor = page.get("next_cursor") or after
            self._dirty = True
        return True

    # --- bootstrap ---------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the whole snapshot again (``GET /ranking-state``) and start from its cursor
        (the thread follows again if an error had stopped it). On any error the mirror keeps
        what it had, and the error is raised."""
        self._install(read_snapshot(self._client, self.namespace, self._page_size))

    def _install(self, snapshot: Snapshot) -> None:
        """Replace everything with ``snapshot`` (all rows and the last page), atomically."""
        rows, page = snapshot
        old = self.__dict__.copy()
        with self._lock:
            try:
                self._reset()
                self._profile = scoring.profile_from_out(page["profile"])
                self.event_types = tuple(page.get("event_types") or MIRROR_TYPES)
                for row in rows:
                    self._put_row(row)
                self._cursor = page["feed_cursor"]
                self._dirty = True
            except Exception:
                self.__dict__.update(old)
                raise
            self.error = None
        self._save(force=True)
        self._start()

    def _load_file(self) -> bool:
        """Resume from ``state_file`` (False when there is none). A file of another namespace
        or server is refused with an RMSValidationError, never silently used."""
        try:
            with open(self.state_file, encoding="utf-8") as handle:  # type: ignore[arg-type]
                state = json.load(handle)
        except FileNotFoundError:
            return False
        if state.get("format") != STATE_FORMAT:
            raise RMSValidationError(f"{self.state_file}: not a mirror state file.")
        if state.get("namespace") != self.namespace or state.get("server") != self._server():
            raise RMSValidationError(
                f"{self.state_file} holds the mirror of {state.get('namespace')!r} at "
                f"{state.get('server')!r}, not of {self.namespace!r} at {self._server()!r}."
            )
        with self._lock:
            self._reset()
            self._profile = scoring.profile_from_out(state["profile"])
            self._follow_types(state["event_types"])
            keys = state["columns"]
            for values in state["objects"]:
                row = dict(zip(keys, values, strict=True))
                row["version"] = row["version_state"]
                self._put_row(row)
                i = self._index[row["object_id"]]
                self._vstate[i], self._vrank[i] = row["version_state"], row["version_ranking"]
            self._cursor = state["cursor"]
        return True

    def _follow_types(self, recorded: Iterable[str]) -> None:
        """Follow what a state file recorded and every type this code applies: a file written
        before a type existed (``namespace.profile_changed``, ``object.erased``) would
        otherwise never receive it. A server older than this code refuses a type it does not
        know (400 on ``types``); the mirror then goes back to the recorded list
        (``_page``)."""
        recorded = tuple(recorded)
        self.event_types = recorded + tuple(t for t in MIRROR_TYPES if t not in recorded)
        self._recorded_types = recorded if self.event_types != recorded else None

    def _server(self) -> str:
        return str(getattr(self._client, "base_url", ""))

    def _save(self, force: bool = False) -> None:
        """Write state and cursor to ``state_file`` atomically (a temporary file renamed over
        it), at most every ``save_interval`` seconds unless forced."""
        if self.state_file is None:
            return
        now = time.monotonic()
        if not force and (not self._dirty or now - self._last_save < self._save_interval):
            return
        columns = list(FILE_COLUMNS)
        with self._lock:
            objects = []
            for oid, i in self._index.items():
                row = self._row(oid, i)
                row["version_state"], row["version_ranking"] = self._vstate[i], self._vrank[i]
                objects.append([_jsonable(row[k]) for k in columns])
            state = {
                "format": STATE_FORMAT,
                "server": self._server(),
                "namespace": self.namespace,
                "cursor": self._cursor,
                "profile": scoring.profile_out(self._profile),
                "event_types": list(self.event_types),
                "columns": columns,
                "objects": objects,
            }
            self._dirty = False
        folder = os.path.dirname(os.path.abspath(self.state_file))
        fd, tmp = tempfile.mkstemp(prefix=".rms-mirror-", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(state, handle, separators=(",", ":"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.state_file)
        except BaseException:
            with _suppress():
                os.unlink(tmp)
            raise
        self._last_save = now

    # --- following the feed ------------------------------------------------------------------

    def _start(self) -> None:
        """Start the thread that follows the feed, unless it runs, the mirror follows nothing
        or is closed (``refresh`` after an error that stopped it starts it again)."""
        with self._lock:
            if not self._follows or self._stop.is_set():
                return
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._follow, name=f"rms-mirror-{self.namespace}", daemon=True
            )
            self._thread.start()

    def _page(self, after: str | None, wait: float) -> dict:
        types = self.event_types
        try:
            return self._client.changes_page(
                namespace=self.namespace, after=after, types=types, limit=1000, wait=wait
            )
        except RMSError as exc:
            recorded = self._recorded_types
            if (
                recorded is None
                or types == recorded
                or exc.status != 400
                or "types" not in (exc.fields or {})
            ):
                raise
            if self.event_types == types:  # the thread and wait_until_current may both come
                log.warning(
                    "rms mirror of %r: the server does not know all of %s; following %s",
                    self.namespace, types, recorded,
                )  # fmt: skip
                self.event_types = recorded
            return self._page(after, wait)

    def _follow(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            after = self._cursor
            try:
                page = self._page(after, self._wait)
            except RMSError as exc:
                if _refused(exc):
                    # The feed refuses this mirror's cursor or namespace: stop, keep the state.
                    error = self._stop_with(after, exc)
                    if error is None:
                        continue  # refreshed meanwhile: follow from the new cursor
                    log.error("rms mirror of %r stopped: %s", self.namespace, error)
                    return
                log.warning("rms mirror of %r: %s; retrying", self.namespace, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            except Exception as exc:  # a closed client while stopping, a bug: never silent
                if self._stop.is_set():
                    return
                log.exception("rms mirror of %r failed", self.namespace)
                self.error = RMSError(None, "mirror_failed", str(exc))
                return
            delay = 0.5
            self._apply_page(after, page)
            self._save()

    def wait_until_current(self, timeout: float = 10.0) -> bool:
        """True once the mirror has read up to the feed's head as of this call (reading the
        rest itself rather than wait for the background thread's long poll); False after
        ``timeout``. Raises the error that stopped the mirror (a refused cursor, a namespace
        it may not read), if one did; the mirror keeps its last good state either way.

        A page that says ``has_more: false`` ends at the head the server had when it read it,
        which is after this call began: applying one is being current."""
        if self.error is not None:
            raise self.error
        deadline = time.monotonic() + timeout
        while True:
            after = self._cursor
            try:
                page = self._page(after, 0)
            except RMSError as exc:
                if _refused(exc):
                    error = self._stop_with(after, exc)
                    if error is None:
                        continue
                    if error is exc:
                        raise
                    raise error from exc
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.2)
                continue
            if self._apply_page(after, page) and not page.get("has_more"):
                return True
            if time.monotonic() >= deadline:
                return False

    def _stop_with(self, after: str | None, exc: RMSError) -> RMSError | None:
        """The error that stops the mirror after a read from ``after`` was refused: the first
        one kept (the thread and ``wait_until_current`` may both meet it); None when the
        mirror is no longer at ``after`` (``refresh`` replaced the cursor: nothing stops)."""
        with self._lock:
            if self._cursor != after:
                return None
            if self.error is None:
                self.error = self._stopped_by(exc)
            return self.error

    def _stopped_by(self, exc: RMSError) -> RMSError:
        """The error a refused read stops the mirror with: the server's, saying what now."""
        if exc.code != FOREIGN_CURSOR:
            return exc
        source = f"its state file {self.state_file}, or " if self.state_file else ""
        message = (
            f"{exc.message} The mirror of {self.namespace!r} holds a feed cursor another "
            f"deployment issued ({source}a server whose database was replaced since); it keeps "
            "answering from its last good state and reads no more changes. Call refresh() to "
            "start again from this server's snapshot."
        )
        return RMSError(exc.status, exc.code, message, exc.fields, body=exc.body)

    # --- reading -----------------------------------------------------------------------------

    @property
    def cursor(self) -> str | None:
        """The feed position the mirror reflects."""
        return self._cursor

    @property
    def profile(self) -> dict:
        return scoring.profile_out(self._profile)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, object_id: object) -> bool:
        return str(object_id) in self._index

    def get(self, object_id: Any) -> dict | None:
        """The object's ranking inputs (``RankingInputs`` fields, id and version), or None."""
        oid = str(object_id)
        with self._lock:
            i = self._index.get(oid)
            return None if i is None else self._row(oid, i)

    def inputs(self, object_id: Any) -> scoring.RankingInputs | None:
        """The object's ``scoring.RankingInputs`` (the pinned reference form), or None."""
        row = self.get(object_id)
        if row is None:
            return None
        return scoring.RankingInputs(
            **{k: v for k, v in row.items() if k not in ("object_id", "version")}
        )

    def rank(self, pairs: Iterable[Any], now: datetime | None = None) -> list[dict]:
        """``[(object_id, similarity), ...]`` → ``[{object_id, score, eligible, reason}]``
        ordered as ``/rank`` orders them (eligible first, best score, then id), scored at the
        clock ``now`` (default: now). An object the mirror does not hold is an
        RMSValidationError, as ``/rank`` answers 400 for a candidate outside the namespace."""
        now_us = (now if now is not None else datetime.now(UTC)) - _EPOCH
        now_us = now_us // _US
        index, hot, since, const, elig = (
            self._index,
            self._hot,
            self._hot_since,
            self._const,
            self._elig,
        )
        w_sim, w_sal, exp = self._profile.similarity, self._profile.salience, math.exp
        k = -_HOT_K
        keyed = []
        append = keyed.append
        with self._lock:
            for oid, sim in pairs:
                i = index.get(oid)
                if i is None:
                    oid = str(oid)
                    i = index.get(oid)
                    if i is None:
                        raise RMSValidationError(
                            f"Object {oid} is not in the mirror of {self.namespace!r}.",
                            {"candidates": [f"Unknown object: {oid}."]},
                        )
                d = now_us - since[i]
                score = w_sim * sim + hot[i] * exp(k * d if d > 0 else 0.0) + const[i]
                if w_sal:
                    score += w_sal * self._salience(i, now_us)
                code = elig[i]
                append((code != 0, -score, oid, code))
        keyed.sort()
        return [
            {"object_id": oid, "score": -neg, "eligible": not out, "reason": REASONS[code]}
            for out, neg, oid, code in keyed
        ]

    def _salience(self, i: int, now_us: int) -> float:
        """SPEC §1's effective salience at ``now_us`` (``scoring.salience_effective``)."""
        base, boost = self._sal[i], self._boost[i]
        decay = self._names[self._decay[i]]
        if self._pinned[i] or decay == "PERMANENT":
            return min(1.0, base + boost)
        since = self._reinforced[i]
        if since == NONE_TS:
            since = self._created[i]
        t = max(0.0, (now_us - since) / _US_PER_DAY)
        lam = scoring.DECAY_RATES[decay]  # type: ignore[index]
        return min(1.0, base * math.exp(-lam * t) + boost * math.exp(-scoring.BOOST_DECAY_RATE * t))

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop following the feed (the thread ends after its current poll) and save."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._wait + 35.0)
        self._save(force=True)
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Mirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Mirror({self.namespace!r}, objects={len(self)}, cursor={self._cursor!r})"


def _refused(exc: RMSError) -> bool:
    """A 4xx other than 429: the server refuses the read itself, retrying cannot help."""
    return exc.status is not None and 400 <= exc.status < 500 and exc.status != 429


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True
