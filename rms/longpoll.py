"""Bounds on the change feed's long polls: a waiting poll parks a request thread, so polls that
wait are limited per process, per client and in total, and one past a bound is refused
(429 with ``Retry-After``) instead of taking the thread that ``/health`` and every other request
needs.

- Per process: a semaphore, taken without blocking, so a process always keeps threads for other
  requests whatever the other bounds (and while the cache is unreachable).
- Per client and in total: slots in the cache shared by every web process (Redis or the file
  cache, ``RMS_CACHE``). A slot is a key taken with ``add`` (atomic on Redis) that expires a little
  after the longest wait, so a process that dies holding slots frees them on its own; a live one
  deletes its keys when the poll ends, whatever way it ends.

A poll that finds events at once never takes a slot: only waiting costs one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import uuid
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.filebased import FileBasedCache

#: Seconds a slot outlives the longest wait: the poll's last read and its answer fit in it.
SLOT_MARGIN = 15
#: Seconds a refused poll is asked to wait before trying again.
RETRY_AFTER = 5

_process_lock = threading.Lock()
_process_semaphore: threading.BoundedSemaphore | None = None
_process_size = 0


class Refused(Exception):
    """No slot: the poll must not wait. ``bound`` names which bound was reached."""

    def __init__(self, bound: str) -> None:
        super().__init__(bound)
        self.bound = bound


def _semaphore() -> threading.BoundedSemaphore:
    """This process's semaphore, rebuilt when the setting changes (tests override it)."""
    global _process_semaphore, _process_size
    size = settings.RMS_LONGPOLL_PER_PROCESS
    with _process_lock:
        if _process_semaphore is None or _process_size != size:
            _process_semaphore = threading.BoundedSemaphore(size)
            _process_size = size
        return _process_semaphore


@contextlib.contextmanager
def _exclusive() -> Iterator[None]:
    """The file cache's ``add`` is a look then a write, so two processes could take one slot:
    there, slots are taken under a lock file beside the cache. Redis's ``add`` is atomic
    (SET NX), and the in-memory cache is one process's."""
    backend = caches["default"]
    if not isinstance(backend, FileBasedCache):
        yield
        return
    os.makedirs(backend._dir, exist_ok=True)
    with open(os.path.join(backend._dir, "longpoll.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _take(prefix: str, count: int, token: str, timeout: float) -> str | None:
    """The key of a free slot among ``count``, now holding ``token``; ``""`` when the cache
    cannot be reached (the bound is not enforced: fail open); None when every slot is held."""
    with _exclusive():
        return _take_unlocked(prefix, count, token, timeout)


def _take_unlocked(prefix: str, count: int, token: str, timeout: float) -> str | None:
    for i in range(count):
        key = f"{prefix}:{i}"
        if cache.add(key, token, timeout):
            return key
        if cache.get(key) is None:  # add refused yet nothing there: the cache is unreachable
            return ""
    return None


def _give_back(key: str, token: str) -> None:
    # Only our own: after an expiry the key may already be another poll's slot.
    if key and cache.get(key) == token:
        cache.delete(key)


@contextlib.contextmanager
def slot(client_id: object, wait: float) -> Iterator[None]:
    """Hold one long-poll slot for ``client_id`` while the block runs; :class:`Refused` when a
    bound is reached. Every slot taken is given back when the block ends, by return or by
    exception; the cache's slots also expire ``wait`` + SLOT_MARGIN seconds after being taken."""
    semaphore = _semaphore()
    if not semaphore.acquire(blocking=False):
        raise Refused("process")
    held: list[str] = []
    token = uuid.uuid4().hex
    timeout = wait + SLOT_MARGIN
    try:
        mine = _take(
            f"rms:longpoll:client:{client_id}", settings.RMS_LONGPOLL_PER_CLIENT, token, timeout
        )
        if mine is None:
            raise Refused("client")
        held.append(mine)
        shared = _take("rms:longpoll:total", settings.RMS_LONGPOLL_TOTAL, token, timeout)
        if shared is None:
            raise Refused("total")
        held.append(shared)
        yield
    finally:
        for key in held:
            _give_back(key, token)
        semaphore.release()
