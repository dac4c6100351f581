"""What an answer says when a dependency was away while it was made (never a 500 for it).

A read that could not use the cache is computed for the request and says so; a write whose
worker task could not be queued is kept (the reconciler sends it later) and says so. The
warnings are ``{"code", "message"}`` items under ``warnings``, the shape ``/metrics`` uses.
"""

from __future__ import annotations

from rms import cache

CACHE_UNAVAILABLE = {
    "code": "cache_unavailable",
    "message": "The cache is unreachable: this answer was computed for this request and not "
    "kept, so the next one computes it again.",
}
BROKER_UNAVAILABLE = {
    "code": "broker_unavailable",
    "message": "The task queue is unreachable: the work is recorded and will start when the "
    "queue is back (the reconciler sends it).",
}


def cache_errors() -> int:
    """A mark to pass to :func:`cache_warnings` after the reads that may use the cache."""
    return cache.errors_in_this_thread()


def cache_warnings(mark: int) -> list[dict]:
    """``[CACHE_UNAVAILABLE]`` when a cache call of this thread failed since ``mark``."""
    return [dict(CACHE_UNAVAILABLE)] if cache.errors_in_this_thread() > mark else []


def broker_warnings(not_sent: bool) -> list[dict]:
    return [dict(BROKER_UNAVAILABLE)] if not_sent else []
