"""The background recorder: interactions are built and checked in the caller's thread, queued,
and posted by one background thread to ``/feedback-sessions/batch``.

Each interaction has its ``request_id`` from the moment it is created, so a batch resent after a
timeout or a dropped connection is stored once (the service answers 200 for what it has); this is
what lets the recorder retry freely. The caller's thread never touches the network: leaving an
interaction only appends to a deque under a lock.

Counters (``stats``): ``queued`` interactions accepted, ``sent`` acknowledged (201 or 200),
``failed`` refused (a 400/409 item, or a batch whose retries ran out; each went to ``on_error``),
``dropped`` refused because the queue was full, ``retried`` interactions resent (once per
resend of their batch), ``pending`` accepted and not yet acknowledged or failed. At every moment
``queued == sent + failed + pending``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from rms_client._calls import MAX_SESSIONS_PER_BATCH, Call, encode
from rms_client._retry import RetryPolicy
from rms_client.errors import RMSError, RMSValidationError
from rms_client.vocabulary import ACTOR_TYPES, DETECTION_METHODS, OUTCOMES, SIGNAL_TYPES, UNUSED

log = logging.getLogger("rms_client")


class Sender(Protocol):
    """What the recorder posts through: a blocking client (``RMSClient``). Named by its shape
    so that this module need not import the client, which imports it."""

    policy: RetryPolicy

    def _run(
        self,
        call: Call,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[], None] | None = None,
    ) -> Any: ...

    def close(self) -> None: ...


OnError = Callable[[dict, RMSError], None]


def _object_id(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    raise RMSValidationError("object_id must be a UUID string.", {"object_id": ["Not a UUID."]})


def _positive_int(name: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise RMSValidationError(f"{name} must be an integer ≥ 1.", {name: ["Must be ≥ 1."]})
    return value


class Interaction:
    """One feedback session under construction. Each method checks its input at once
    (RMSValidationError, a ValueError); leaving the ``with`` block queues it."""

    __slots__ = ("_recorder", "body", "_injections", "_signals", "_injected", "_unused", "_done")

    def __init__(
        self,
        recorder: Recorder,
        namespace: str | Sequence[str],
        context_budget: int,
        session_id: str | None = None,
        request_id: str | None = None,
        **fields: Any,
    ) -> None:
        self._recorder = recorder
        scope = [namespace] if isinstance(namespace, str) else list(namespace)
        if not scope:
            raise RMSValidationError("Give a namespace.", {"namespace_scope": ["Required."]})
        if type(context_budget) is not int or context_budget < 0:
            raise RMSValidationError(
                "context_budget must be an integer ≥ 0.", {"context_budget": ["Must be ≥ 0."]}
            )
        self.body: dict[str, Any] = {
            "session_id": session_id or str(uuid.uuid4()),
            "request_id": request_id or str(uuid.uuid4()),
            "namespace_scope": scope,
            "context_budget": context_budget,
        }
        outcome = fields.pop("outcome", None)
        for key, value in fields.items():
            if value is not None:
                self.body[key] = value.isoformat() if isinstance(value, datetime) else value
        self._injections: list[dict] = []
        self._signals: list[dict] = []
        self._injected: set[str] = set()
        self._unused: set[str] = set()
        self._done = False
        if outcome is not None:
            self.outcome(outcome)

    @property
    def request_id(self) -> str:
        return self.body["request_id"]

    @property
    def session_id(self) -> str:
        return self.body["session_id"]

    def injected(
        self,
        object_id: str | uuid.UUID,
        rank: int | None = None,
        *,
        token_cost: int,
        composite_score: float | None = None,
        representation_type: str | None = None,
        str_value: float | None = None,
    ) -> Interaction:
        """An object put in the context. ``rank`` defaults to the next position."""
        oid = _object_id(object_id)
        if oid in self._injected:
            raise RMSValidationError(
                f"Object {oid} is already injected in this interaction.",
                {f"injections.{len(self._injections)}.object_id": ["Injected twice."]},
            )
        entry: dict[str, Any] = {
            "object_id": oid,
            "rank_position": len(self._injections) + 1
            if rank is None
            else _positive_int("rank", rank),
            "token_cost": _positive_int("token_cost", token_cost),
        }
        if composite_score is not None:
            entry["composite_score"] = composite_score
        if representation_type is not None:
            entry["representation_type"] = representation_type
        if str_value is not None:
            entry["str_value"] = str_value
        self._injected.add(oid)
        self._injections.append(entry)
        return self

    def signal(
        self,
        object_id: str | uuid.UUID,
        signal_type: str,
        *,
        actor_id: str | None = None,
        actor_type: str | None = None,
        detection_method: str | None = None,
        evidence_ids: Sequence[str] | None = None,
    ) -> Interaction:
        """An explicit signal on an object in this session."""
        oid = _object_id(object_id)
        at = f"signals.{len(self._signals)}"
        if signal_type not in SIGNAL_TYPES:
            raise RMSValidationError(
                f"Unknown signal type {signal_type!r}.", {f"{at}.signal_type": ["Unknown."]}
            )
        if detection_method is not None and detection_method not in DETECTION_METHODS:
            raise RMSValidationError(
                f"Unknown detection method {detection_method!r}.",
                {f"{at}.detection_method": ["Unknown."]},
            )
        if actor_type is not None and actor_type not in ACTOR_TYPES:
            raise RMSValidationError(
                f"Unknown actor type {actor_type!r}.", {f"{at}.actor_type": ["Unknown."]}
            )
        if signal_type == UNUSED:
            if oid in self._unused:
                raise RMSValidationError(
                    "At most one UNUSED per object.", {f"{at}.signal_type": ["Twice."]}
                )
            self._unused.add(oid)
        entry: dict[str, Any] = {"object_id": oid, "signal_type": signal_type}
        if actor_id is not None:
            entry["actor_id"] = actor_id
        if actor_type is not None:
            entry["actor_type"] = actor_type
        if detection_method is not None:
            entry["detection_method"] = detection_method
        if evidence_ids:
            entry["evidence_ids"] = list(evidence_ids)
        self._signals.append(entry)
        return self

    def response(self, text: str, detect: bool = True) -> Interaction:
        """The model's output; with ``detect`` the service infers REFERENCED/UNUSED for the
        injected objects that got no explicit signal."""
        if detect and not (isinstance(text, str) and text.strip()):
            raise RMSValidationError(
                "detect needs a non-empty response text.", {"response_text": ["Required."]}
            )
        self.body["response_text"] = text
        self.body["detect"] = bool(detect)
        return self

    def outcome(self, value: str) -> Interaction:
        if value not in OUTCOMES:
            raise RMSValidationError(
                f"Unknown outcome {value!r}; one of {sorted(OUTCOMES)}.", {"outcome": ["Unknown."]}
            )
        self.body["outcome"] = value
        return self

    def build(self) -> dict:
        """The session body as it will be posted."""
        body = self.body
        body["injections"] = self._injections
        body["signals"] = self._signals
        if "tokens_used" not in body:
            body["tokens_used"] = sum(i["token_cost"] for i in self._injections)
        return body

    def record(self) -> bool:
        """Queue it (once); False if the queue was full and it was dropped."""
        if self._done:
            return True
        self._done = True
        return self._recorder._enqueue(self.build())

    def __enter__(self) -> Interaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        if exc_type is not None and issubclass(exc_type, RMSValidationError):
            self._done = True  # the builder was misused: nothing to record
            return
        if exc_type is not None and "outcome" not in self.body:
            self.body["outcome"] = "FAILED"  # the agent's turn raised
        self.record()


class Recorder:
    """Batches interactions in the background (see the module docstring).

    ``flush_at`` interactions queued, or ``flush_interval`` seconds since the oldest one in the
    batch, trigger a post (at most 500 a batch). ``max_queue`` bounds what waits; when it is
    full, ``on_full="drop"`` drops the new interaction (counted, logged once per burst) and
    ``"block"`` waits for room. ``on_error(body, error)`` gets every refused interaction.
    ``close()`` flushes within ``shutdown_timeout``; it also runs at interpreter exit.
    """

    def __init__(
        self,
        client: Sender,
        *,
        flush_at: int = 100,
        flush_interval: float = 1.0,
        max_queue: int = 10_000,
        on_error: OnError | None = None,
        on_full: str = "drop",
        shutdown_timeout: float = 10.0,
        max_retries: int | None = None,
        retry_deadline: float | None = None,
        owns_client: bool = False,
    ) -> None:
        if on_full not in ("drop", "block"):
            raise ValueError("on_full must be 'drop' or 'block'.")
        if flush_at < 1 or max_queue < 1:
            raise ValueError("flush_at and max_queue must be ≥ 1.")
        self.client = client
        self.flush_at = flush_at
        self.batch_size = min(flush_at, MAX_SESSIONS_PER_BATCH)
        self.flush_interval = flush_interval
        self.max_queue = max_queue
        self.on_error = on_error
        self.on_full = on_full
        self.shutdown_timeout = shutdown_timeout
        base = client.policy
        self.policy = RetryPolicy(
            base.max_retries if max_retries is None else max_retries,
            base.backoff_base,
            base.backoff_max,
            base.deadline if retry_deadline is None else retry_deadline,
        )
        self._owns_client = owns_client
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """Fresh state: at creation, and in a forked child (whose copy of the parent's queue
        is the parent's to send)."""
        self._cond = threading.Condition()
        self._buffer: deque[dict] = deque()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._closed = False
        self._accepted = 0  # interactions ever queued
        self._finished = 0  # interactions acknowledged or failed
        self._flush_target = 0
        self._dropping = False
        self._first_at = 0.0
        self._stats = {"queued": 0, "sent": 0, "failed": 0, "dropped": 0, "retried": 0}
        self._pid = os.getpid()

    # --- the caller's side -------------------------------------------------------------------

    def interaction(
        self,
        namespace: str | Sequence[str],
        *,
        context_budget: int,
        session_id: str | None = None,
        request_id: str | None = None,
        **fields: Any,
    ) -> Interaction:
        """A new interaction; the session fields of API.md as keywords (``tokens_used``
        defaults to the sum of the injected ``token_cost``)."""
        return Interaction(
            self, namespace, context_budget, session_id=session_id, request_id=request_id,
            **fields,
        )  # fmt: skip

    def record(self, session: Mapping[str, Any]) -> bool:
        """Queue a session body built elsewhere (a ``request_id`` is added if absent)."""
        body = encode(dict(session))
        body.setdefault("request_id", str(uuid.uuid4()))
        return self._enqueue(body)

    def _enqueue(self, body: dict) -> bool:
        with self._cond:
            if self._closed or self._closing:
                raise RuntimeError("This recorder is closed.")
            if len(self._buffer) >= self.max_queue:
                if self.on_full == "drop":
                    self._stats["dropped"] += 1
                    if not self._dropping:
                        self._dropping = True
                        log.warning(
                            "rms_client: recorder queue full (%d); dropping interactions",
                            self.max_queue,
                        )
                    return False
                self._start()
                while len(self._buffer) >= self.max_queue and not self._closing:
                    self._cond.wait()
            self._dropping = False
            self._buffer.append(body)
            self._accepted += 1
            self._stats["queued"] += 1
            n = len(self._buffer)
            if self._thread is None:
                self._start()
            # Wake the sender only when it has something new to decide: the first item starts
            # the flush_interval clock, the batch_size-th completes a batch.
            if n == 1:
                self._first_at = time.monotonic()
                self._cond.notify_all()
            elif n == self.batch_size:
                self._cond.notify_all()
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Send now and wait until everything queued so far is acknowledged or failed; False
        if ``timeout`` seconds passed first."""
        with self._cond:
            target = self._accepted
            if self._finished >= target:
                return True
            self._flush_target = max(self._flush_target, target)
            self._start()
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._finished >= target, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush (within ``timeout``, default ``shutdown_timeout``) and stop the thread.
        True if everything was delivered or failed; what is left is logged."""
        timeout = self.shutdown_timeout if timeout is None else timeout
        with self._cond:
            if self._closed:
                return True
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._cond:
            self._closed = True
            left = self._accepted - self._finished
        _LIVE.discard(self)
        if left:
            log.warning("rms_client: recorder closed with %d interactions undelivered", left)
        if self._owns_client:
            self.client.close()
        return left == 0

    @property
    def stats(self) -> dict[str, int]:
        with self._cond:
            return {**self._stats, "pending": self._accepted - self._finished}

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the sender thread -------------------------------------------------------------------

    def _start(self) -> None:
        """Start the sender if it is not running (called with the lock held)."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._loop, name="rms-client-recorder", daemon=True
            )
            self._thread.start()

    def _take(self) -> list[dict] | None:
        """Wait for the next batch; None when closing and nothing is left."""
        with self._cond:
            while True:
                n = len(self._buffer)
                if n:
                    wait = self._first_at + self.flush_interval - time.monotonic()
                    if (
                        n >= self.batch_size
                        or wait <= 0
                        or self._closing
                        or self._flush_target > self._finished
                    ):
                        take = min(n, self.batch_size)
                        batch = [self._buffer.popleft() for _ in range(take)]
                        self._first_at = time.monotonic()  # the clock of what is left
                        self._cond.notify_all()  # room for a caller blocked on a full queue
                        return batch
                    self._cond.wait(wait)
                elif self._closing:
                    return None
                else:
                    self._cond.wait()

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._send(batch)
            except Exception as exc:  # never let the thread die with interactions in hand
                log.exception("rms_client: recorder failed to send a batch")
                err = RMSError(None, "client_error", str(exc))
                self._count("failed", len(batch))
                for body in batch:
                    self._report(body, err)
            with self._cond:
                self._finished += len(batch)
                self._cond.notify_all()

    def _count(self, key: str, n: int) -> None:
        with self._cond:
            self._stats[key] += n

    def _send(self, batch: list[dict]) -> None:
        call = Call("POST", "/feedback-sessions/batch", body=batch, idempotent=True)
        try:
            answer = self.client._run(
                call, policy=self.policy, on_retry=lambda: self._count("retried", len(batch))
            )
        except RMSError as err:
            if err.status == 413 and len(batch) > 1:  # too large: halve and send each half
                half = len(batch) // 2
                self._send(batch[:half])
                self._send(batch[half:])
                return
            self._count("failed", len(batch))
            for body in batch:
                self._report(body, err)
            return
        results = answer.get("results", []) if isinstance(answer, dict) else []
        sent = 0
        for i, body in enumerate(batch):
            item = results[i] if i < len(results) else None
            status = item.get("status") if isinstance(item, dict) else None
            if status in (200, 201):
                sent += 1
                continue
            self._count("failed", 1)
            if item is None:
                err = RMSError(None, "bad_answer", "The batch answer has no result for it.")
            else:
                err = RMSError.from_response(status or 0, {"error": item.get("error")})
            self._report(body, err)
        self._count("sent", sent)

    def _report(self, body: dict, err: RMSError) -> None:
        if self.on_error is None:
            log.warning("rms_client: interaction %s refused: %s", body.get("request_id"), err)
            return
        try:
            self.on_error(body, err)
        except Exception:
            log.exception("rms_client: on_error raised")


#: Live recorders: closed at interpreter exit, reset in a forked child.
_LIVE: weakref.WeakSet[Recorder] = weakref.WeakSet()


def _close_all() -> None:
    for rec in list(_LIVE):
        try:
            rec.close()
        except Exception:  # at exit, one recorder's failure must not stop the others
            log.exception("rms_client: closing a recorder at exit failed")


def _after_fork_in_child() -> None:
    for rec in list(_LIVE):
        rec._reset()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
