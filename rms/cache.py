"""The Redis cache behind one door that degrades instead of failing.

Everything cached here (throttle counts, the overview's precomputed numbers) can be recomputed
or done without, so with Redis unreachable a read is a miss and a write does nothing: the API
and the dashboard go on, slower and unthrottled, rather than answering 500. Each failure is
counted (``rms.telemetry.CACHE_ERRORS``) and logged at most once per LOG_EVERY seconds, and
``errors_in_this_thread()`` lets a caller (the throttle) tell a miss from an outage.
"""

from __future__ import annotations

import logging
import threading
import time

from django.core.cache.backends.redis import RedisCache

from rms import telemetry

logger = logging.getLogger(__name__)
LOG_EVERY = 30.0  # seconds

_local = threading.local()
_last_log = [0.0]


def errors_in_this_thread() -> int:
    """Cache operations of this thread that failed so far (compare before and after a call)."""
    return getattr(_local, "errors", 0)


def _failed(op: str, exc: Exception) -> None:
    _local.errors = errors_in_this_thread() + 1
    telemetry.incr(telemetry.CACHE_ERRORS, op)
    now = time.monotonic()
    if now - _last_log[0] >= LOG_EVERY:
        _last_log[0] = now
        logger.warning("cache unavailable (%s failed: %s); continuing without it", op, exc)


def _errors():
    import redis

    return (redis.RedisError, OSError)


class TolerantRedisCache(RedisCache):
    def _try(self, op: str, default, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except _errors() as exc:
            _failed(op, exc)
            return default

    def get(self, key, default=None, version=None):
        return self._try("get", default, super().get, key, default, version)

    def get_many(self, keys, version=None):
        return self._try("get_many", {}, super().get_many, keys, version)

    def has_key(self, key, version=None):
        return self._try("has_key", False, super().has_key, key, version)

    def set(self, *args, **kwargs):
        self._try("set", None, super().set, *args, **kwargs)

    def set_many(self, *args, **kwargs):
        return self._try("set_many", [], super().set_many, *args, **kwargs)

    def add(self, *args, **kwargs):
        return self._try("add", False, super().add, *args, **kwargs)

    def touch(self, *args, **kwargs):
        return self._try("touch", False, super().touch, *args, **kwargs)

    def delete(self, *args, **kwargs):
        return self._try("delete", False, super().delete, *args, **kwargs)

    def delete_many(self, *args, **kwargs):
        self._try("delete_many", None, super().delete_many, *args, **kwargs)

    def clear(self):
        return self._try("clear", False, super().clear)

    def incr(self, key, delta=1, version=None):
        # A missing key is ValueError (as in every backend); an outage is a miss too.
        result = self._try("incr", None, super().incr, key, delta, version)
        if result is None:
            raise ValueError(f"Key {key!r} not found (cache unavailable).")
        return result
