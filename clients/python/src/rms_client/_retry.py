"""When to resend a request, and how long to wait first: one policy for both clients.

A request is resent after a connection error, a timeout, a 429 (after its ``Retry-After``), a
502/503/504, or (idempotent calls) a 202 with ``Retry-After`` (an answer the server is still
computing, e.g. ``GET /suppressed`` of a large namespace), with exponential backoff and full
jitter (AWS architecture blog, "Exponential Backoff And Jitter"), at most ``max_retries`` times
and never past the call's total deadline. A 4xx other than 429 is final. A call the server does
not make idempotent is resent only when the failure shows the server did nothing: the connection
was never made, or the answer was 429 or 503 (this service's answers while throttled or while
its database is down).
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

import httpx

from rms_client.errors import RMSError

#: Statuses that ask for a resend. 502 and 504 come from a proxy, which may have delivered the
#: request, so they are resent only for idempotent calls.
RETRY_ALWAYS = frozenset({429, 503})
RETRY_IDEMPOTENT = frozenset({502, 504})

#: Failures that prove the request never reached the server.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` resends at most; ``deadline`` seconds at most for the whole logical call
    (first attempt, waits and resends; ``None``: no limit but ``max_retries``)."""

    max_retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    deadline: float | None = 120.0

    def backoff(self, retry: int) -> float:
        """Full jitter: uniform in [0, min(cap, base · 2^retry)] for the retry-th resend."""
        return random.uniform(0.0, min(self.backoff_max, self.backoff_base * (2.0**retry)))


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (a number of seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Attempts:
    """The retry state of one logical call. After each attempt the driver asks for the delay
    before the next one; ``None`` means the answer is final, an RMSError means give up."""

    def __init__(self, policy: RetryPolicy, idempotent: bool) -> None:
        self.policy = policy
        self.idempotent = idempotent
        self.started = time.monotonic()
        self.retries = 0
        #: True once a resend followed a failure after which the server may have acted.
        self.maybe_applied = False

    def _remaining(self) -> float:
        if self.policy.deadline is None:
            return float("inf")
        return self.policy.deadline - (time.monotonic() - self.started)

    def _next(self, wait: float | None, give_up: RMSError) -> float:
        if self.retries >= self.policy.max_retries:
            raise give_up
        delay = self.policy.backoff(self.retries) if wait is None else wait
        if delay >= self._remaining():
            raise give_up
        self.retries += 1
        return delay

    def after_error(self, exc: Exception) -> float:
        """The delay before resending after a transport failure, or raise RMSError."""
        code = "timeout" if isinstance(exc, httpx.TimeoutException) else "connection_error"
        give_up = RMSError(None, code, f"{type(exc).__name__}: {exc}".rstrip(": "))
        give_up.__cause__ = exc
        not_sent = isinstance(exc, _NOT_SENT)
        if not (self.idempotent or not_sent):
            raise give_up
        delay = self._next(None, give_up)
        if not not_sent:
            self.maybe_applied = True
        return delay

    def after_response(self, response: httpx.Response) -> float | None:
        """The delay before resending after this answer, or None if it is final."""
        status = response.status_code
        if computing(response) and self.idempotent:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            try:
                return self._next(retry_after, _error_of(response, retry_after))
            except RMSError:
                return None  # out of retries: the caller raises for the 202
        if status in RETRY_ALWAYS or (self.idempotent and status in RETRY_IDEMPOTENT):
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            try:
                delay = self._next(retry_after, _error_of(response, retry_after))
            except RMSError:
                return None  # out of retries: this answer is the final one
            if status in RETRY_IDEMPOTENT:
                self.maybe_applied = True  # a proxy may have delivered it
            return delay
        return None


def computing(response: httpx.Response) -> bool:
    """A 202 with ``Retry-After``: the answer is being computed; ask again after it."""
    return response.status_code == 202 and "Retry-After" in response.headers


def _error_of(response: httpx.Response, retry_after: float | None) -> RMSError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return RMSError.from_response(response.status_code, body, retry_after)
