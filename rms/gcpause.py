"""Pausing Python's cyclic garbage collector over a bounded burst of allocations.

A batch of feedback sessions or a sweep chunk builds hundreds of thousands of small, acyclic
objects (rows, payloads, hashes) that live until the transaction commits. Each time the
allocation count crosses a threshold, the collector walks the young objects, and every few
rounds the whole heap, and finds nothing: reference counting frees all of it. Measured on a batch
of 500 sessions, that walking is about a sixth of the CPU time (docs/PERFORMANCE.md).

:func:`paused` disables the collector for the block and re-enables it when the last block open
in the process ends (blocks may nest or overlap across threads), if it was enabled before the
first one. The work inside is bounded (a batch has at most 500 sessions, a chunk 500 objects),
so memory is too; cycles made inside are collected once the collector runs again.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_lock = threading.Lock()
_open = 0
_restore = False


@contextlib.contextmanager
def paused():
    global _open, _restore
    with _lock:
        if _open == 0:
            _restore = gc.isenabled()
            gc.disable()
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0 and _restore:
                gc.enable()
