"""Bulk writes through the storage layer (``rms.store``), under their historical names.

Kept for ``feedback.sweep`` and the bench scripts, which write through ``bulk.insert`` and
``bulk.batched``; new code calls ``rms.store.get()`` directly. Nothing here knows the database.
"""

from __future__ import annotations

from rms import store


def insert(model, rows: list) -> None:
    store.get().insert(model, rows)


def update(model, rows: list, field_names: list[str]) -> None:
    store.get().update(model, rows, field_names)


def update_values(model, field_names: list[str], rows: list) -> None:
    store.get().update_values(model, field_names, rows)


def batched():
    return store.get().batched()


def pipelined():
    return store.get().pipelined()


def pipelining() -> bool:
    return store.get().pipelining()
