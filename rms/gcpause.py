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

Under steady concurrent load, blocks of several threads may overlap for ever and the collector
would never come back on. So a block that ends while others are still open, once the collector
has been off for ``MAX_PAUSE`` seconds, collects the youngest generation itself: with the
collector off nothing is promoted, so that generation holds every object made since the pause
began, and with it any cyclic garbage.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time

#: Longest time the collector stays off under overlapping blocks before a block's end collects.
MAX_PAUSE = 1.0

_lock = threading.Lock()
_open = 0
_restore = False
_since = 0.0


@contextlib.contextmanager
def paused():
    global _open, _restore, _since
    with _lock:
        if _open == 0:
            _restore = gc.isenabled()
            _since = time.monotonic()
            gc.disable()
        _open += 1
    try:
        yield
    finally:
        overdue = False
        with _lock:
            _open -= 1
            if _open == 0:
                if _restore:
                    gc.enable()
            elif _restore and time.monotonic() - _since >= MAX_PAUSE:
                overdue = True
                _since = time.monotonic()
        if overdue:
            gc.collect(0)
