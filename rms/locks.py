"""Row locks, taken once per write, in primary-key order (STYLE §4, SPEC §6).

Ordering by pk means two writes touching overlapping sets of objects acquire their locks in the
same order and cannot deadlock. The lock itself is the storage layer's (``rms.store``).
"""

from __future__ import annotations

from collections.abc import Iterable

from rms import store
from rms.models import Namespace


def lock_objects(ids: Iterable, *, namespaces: Iterable[Namespace] = ()) -> dict:
    """Lock the objects with these ids and return them by id (missing ids are simply absent).

    ``namespaces`` the caller already loaded are attached instead of read again. Rows that only
    their writers change under these locks (aggregates, tallies) must be read by a later
    statement, never joined here (``rms.store.base.Store.read``).
    """
    return store.get().lock_objects(ids, namespaces=namespaces)
