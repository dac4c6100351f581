"""``RMSClient`` (blocking) and ``AsyncRMSClient`` (coroutines): the same calls, one pooled
httpx client each, retries by ``_retry.RetryPolicy``.

One logical call is written once, as ``_Base._exchange``: a generator that builds each request,
reads each answer and decides what comes next (a resend after a delay, the refetch of objects a
lost answer created, or the result), without doing any I/O itself. Each client is a thin
transport that drives it: it performs the ``_Send`` and ``_Sleep`` steps the generator yields,
blocking or awaited, the way sans-I/O protocol libraries (h11, the core of httpx's own
transports) share one state machine between sync and async code.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from rms_client._calls import _NO_BODY, Call, Endpoints
from rms_client._retry import Attempts, RetryPolicy, computing, parse_retry_after
from rms_client._version import __version__
from rms_client.errors import RMSError
from rms_client.mirror import DEFAULT_PAGE_SIZE, Mirror, aread_snapshot
from rms_client.recorder import Recorder

API_PREFIX = "/api/v1"
USER_AGENT = f"rms-client/{__version__}"
#: Extra seconds a long-poll ``/changes`` call may take beyond its ``wait``.
LONG_POLL_MARGIN = 10.0
TASK_DONE = frozenset({"succeeded", "failed"})


def api_base(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith(API_PREFIX) else base + API_PREFIX


def relative_next(next_url: str) -> str:
    """The ``next`` link of a page as a path under the API base (the link's host is the one the
    server saw, which behind a proxy need not be ours)."""
    parts = urlsplit(next_url)
    path = parts.path
    at = path.find(API_PREFIX)
    path = path[at + len(API_PREFIX) :] if at >= 0 else path
    return path + (f"?{parts.query}" if parts.query else "")


class _Refetch(Exception):
    """A 409 ``object_exists`` after a resend: the first attempt created the objects."""

    def __init__(self, call: Call) -> None:
        self.call = call


def _finish(call: Call, response: httpx.Response, attempts: Attempts) -> Any:
    status = response.status_code
    if computing(response) and call.idempotent:
        # Still being computed when the retries ran out: not an answer to return.
        body = response.json() if response.content else None
        raise RMSError(
            status,
            "computing",
            "the server is still computing the answer; ask again later",
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            body=body,
        )
    if status < 400:
        if call.text:
            return response.text
        data = response.json() if response.content else None
        return call.then(data) if call.then is not None else data
    try:
        body = response.json()
    except ValueError:
        body = None
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    err = RMSError.from_response(status, body, retry_after)
    if attempts.maybe_applied:
        if status == 409 and call.fetch_if_exists and err.code == "object_exists":
            raise _Refetch(call)
        if status == 404 and call.gone_ok:
            return None
    raise err


@dataclass(frozen=True)
class _Send:
    """Send one request (``httpx`` keyword arguments); the driver sends back the answer, or
    throws the ``httpx.TransportError`` the attempt raised."""

    args: dict[str, Any]


@dataclass(frozen=True)
class _Sleep:
    """Wait ``seconds`` before the next attempt."""

    seconds: float


#: What ``_Base._exchange`` yields, is sent back, and returns.
_Exchange = Generator[_Send | _Sleep, Any, Any]


class _Base(Endpoints):
    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        max_retries: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        retry_deadline: float | None = 120.0,
        headers: dict[str, str] | None = None,
        max_connections: int = 10,
    ) -> None:
        self.base_url = api_base(base_url)
        self.token = token
        self.timeout = timeout
        self.policy = RetryPolicy(max_retries, backoff_base, backoff_max, retry_deadline)
        self._options: dict[str, Any] = {
            "timeout": timeout,
            "max_retries": max_retries,
            "backoff_base": backoff_base,
            "backoff_max": backoff_max,
            "retry_deadline": retry_deadline,
            "headers": headers,
            "max_connections": max_connections,
        }
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        if token:
            self._headers["Authorization"] = f"Token {token}"
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )

    def _request_args(self, call: Call, url: str | None = None) -> dict[str, Any]:
        args: dict[str, Any] = {"method": call.method, "url": url or call.path}
        if call.params:
            args["params"] = call.params
        if call.body is not _NO_BODY:
            args["json"] = call.body
        wait = call.extra.get("wait")
        if wait:
            args["timeout"] = httpx.Timeout(self.timeout + float(wait) + LONG_POLL_MARGIN)
        elif call.timeout is not None:
            args["timeout"] = call.timeout
        return args

    @staticmethod
    def _refetch_calls(call: Call) -> list[Call]:
        return [Call("GET", path, idempotent=True) for path in call.fetch_if_exists]

    def _exchange(
        self,
        call: Call,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[], None] | None = None,
        url: str | None = None,
    ) -> _Exchange:
        """One logical call, attempts and waits included, as steps for a driver (see the
        module docstring); returns the call's result."""
        attempts = Attempts(policy or self.policy, call.idempotent)
        args = self._request_args(call, url)
        while True:
            try:
                response = yield _Send(args)
            except httpx.TransportError as exc:
                delay = attempts.after_error(exc)
            else:
                delay = attempts.after_response(response)
                if delay is None:
                    try:
                        return _finish(call, response, attempts)
                    except _Refetch:
                        found = []
                        for refetch in self._refetch_calls(call):
                            found.append((yield from self._exchange(refetch)))
                        return found if call.fetch_many else found[0]
            if on_retry is not None:
                on_retry()
            yield _Sleep(delay)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"


class RMSClient(_Base):
    """The blocking client. Thread-safe (one connection pool); after ``os.fork`` the child
    opens its own pool on first use, never the parent's sockets."""

    def __init__(self, base_url: str, token: str | None = None, **options: Any) -> None:
        super().__init__(base_url, token, **options)
        self._pid = os.getpid()
        self._client = self._new_http()

    def _new_http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self.timeout,
            limits=self._limits,
        )

    @property
    def http(self) -> httpx.Client:
        if self._pid != os.getpid():  # a forked child: the pool's sockets are the parent's
            self._pid = os.getpid()
            self._client = self._new_http()
        return self._client

    def _run(
        self,
        call: Call,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[], None] | None = None,
        url: str | None = None,
    ) -> Any:
        """Drive ``_exchange`` with blocking I/O."""
        steps = self._exchange(call, policy, on_retry, url)
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    time.sleep(step.seconds)
                    step = steps.send(None)
                    continue
                try:
                    response = self.http.request(**step.args)
                except httpx.TransportError as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(response)
        except StopIteration as done:
            return done.value

    def _run_all(self, calls: list[Call], combine: Callable[[list[Any]], Any]) -> Any:
        return combine([self._run(call) for call in calls])

    def _paginate(self, path: str, params: dict[str, Any]) -> Iterator[dict]:
        call = Call("GET", path, params, idempotent=True)
        url = None
        while True:
            page = self._run(call, url=url)
            yield from page["results"]
            if not page.get("next"):
                return
            url = relative_next(page["next"])
            call = Call("GET", url, idempotent=True)

    def _collect(self, path: str, params: dict[str, Any]) -> list[dict]:
        return list(self._paginate(path, params))

    def changes(
        self,
        *,
        namespace: str | None = None,
        after: str | None = None,
        types: Iterable[str] | None = None,
        wait: float = 20,
        limit: int | None = None,
        idle: Callable[[str | None], bool] | None = None,
    ) -> Iterator[dict]:
        """An endless iterator over ``/changes``: each event's ``cursor`` resumes the feed
        after it (store it once the event is processed). Long-polls ``wait`` seconds when the
        feed is quiet. ``idle(cursor)`` is called after a page with no events; returning
        ``False`` ends the iteration (default: go on for ever)."""
        cursor = after
        types = list(types) if types is not None else None
        while True:
            page = self.changes_page(
                namespace=namespace, after=cursor, types=types, limit=limit, wait=wait
            )
            yield from page["results"]
            cursor = page.get("next_cursor") or cursor
            if not page["results"] and idle is not None and idle(cursor) is False:
                return

    def wait_task(self, task_id: str, *, timeout: float = 300.0, poll: float = 0.5) -> dict:
        """Poll ``GET /tasks/{id}`` until it succeeded or failed; RMSError ``task_timeout``
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            task = self.get_task(task_id)
            if task["state"] in TASK_DONE:
                return task
            if time.monotonic() >= deadline:
                raise RMSError(None, "task_timeout", f"Task {task_id} is still {task['state']}.")
            time.sleep(poll)

    def recorder(self, **options: Any) -> Recorder:
        """A background recorder posting through this client (see ``rms_client.recorder``)."""
        return Recorder(self, **options)

    def mirror(self, namespace: str, state_file: str | None = None, **options: Any) -> Mirror:
        """A local score mirror of ``namespace`` (see ``rms_client.mirror``): read from the
        snapshot (or ``state_file``) now, then kept current by a background thread."""
        return Mirror(self, namespace, state_file, **options)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RMSClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRMSClient(_Base):
    """The same calls as ``RMSClient``, as coroutines on one ``httpx.AsyncClient`` (every
    method returns an awaitable; the list iterators are async iterators)."""

    def __init__(self, base_url: str, token: str | None = None, **options: Any) -> None:
        super().__init__(base_url, token, **options)
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=self.timeout,
            limits=self._limits,
        )

    @property
    def http(self) -> httpx.AsyncClient:
        return self._client

    async def _run(
        self,
        call: Call,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[], None] | None = None,
        url: str | None = None,
    ) -> Any:
        """Drive ``_exchange`` with awaited I/O."""
        steps = self._exchange(call, policy, on_retry, url)
        try:
            step = next(steps)
            while True:
                if isinstance(step, _Sleep):
                    await asyncio.sleep(step.seconds)
                    step = steps.send(None)
                    continue
                try:
                    response = await self._client.request(**step.args)
                except httpx.TransportError as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(response)
        except StopIteration as done:
            return done.value

    async def _run_all(self, calls: list[Call], combine: Callable[[list[Any]], Any]) -> Any:
        return combine([await self._run(call) for call in calls])

    async def _paginate(self, path: str, params: dict[str, Any]) -> AsyncIterator[dict]:
        call = Call("GET", path, params, idempotent=True)
        url = None
        while True:
            page = await self._run(call, url=url)
            for item in page["results"]:
                yield item
            if not page.get("next"):
                return
            url = relative_next(page["next"])
            call = Call("GET", url, idempotent=True)

    async def _collect(self, path: str, params: dict[str, Any]) -> list[dict]:
        return [item async for item in self._paginate(path, params)]

    async def changes(
        self,
        *,
        namespace: str | None = None,
        after: str | None = None,
        types: Iterable[str] | None = None,
        wait: float = 20,
        limit: int | None = None,
        idle: Callable[[str | None], bool] | None = None,
    ) -> AsyncIterator[dict]:
        """``RMSClient.changes`` as an async iterator."""
        cursor = after
        types = list(types) if types is not None else None
        while True:
            page = await self.changes_page(
                namespace=namespace, after=cursor, types=types, limit=limit, wait=wait
            )
            for event in page["results"]:
                yield event
            cursor = page.get("next_cursor") or cursor
            if not page["results"] and idle is not None and idle(cursor) is False:
                return

    async def wait_task(self, task_id: str, *, timeout: float = 300.0, poll: float = 0.5) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            task = await self.get_task(task_id)
            if task["state"] in TASK_DONE:
                return task
            if time.monotonic() >= deadline:
                raise RMSError(None, "task_timeout", f"Task {task_id} is still {task['state']}.")
            await asyncio.sleep(poll)

    def recorder(self, **options: Any) -> Recorder:
        """The background recorder is thread-based and never blocks the event loop (it only
        enqueues); it posts through a blocking twin of this client with the same settings."""
        twin = RMSClient(self.base_url, self.token, **self._options)
        return Recorder(twin, owns_client=True, **options)

    async def mirror(self, namespace: str, state_file: str | None = None, **options: Any) -> Mirror:
        """The local score mirror of ``namespace``, bootstrapped through this client: the
        snapshot (unless ``state_file`` exists to resume from) is read with awaited calls.
        ``rank`` and ``get`` never touch the network, so they are plain calls in async code.
        It is the same ``Mirror`` as ``RMSClient.mirror``'s: its background thread follows the
        feed through a blocking twin of this client with the same settings (closed by the
        mirror's ``close()``); ``wait_until_current`` and ``refresh`` use the twin too, so in
        a coroutine call them with ``asyncio.to_thread``."""
        snapshot = None
        if state_file is None or not os.path.exists(state_file):
            page_size = options.get("page_size", DEFAULT_PAGE_SIZE)
            snapshot = await aread_snapshot(self, namespace, page_size)
        twin = RMSClient(self.base_url, self.token, **self._options)
        try:
            return Mirror(
                twin, namespace, state_file, snapshot=snapshot, owns_client=True, **options
            )
        except BaseException:
            twin.close()
            raise

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncRMSClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["RMSClient", "AsyncRMSClient"]
