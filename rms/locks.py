"""Row locks, taken once per write, in primary-key order (STYLE §4, SPEC §6).

Ordering by pk means two sessions touching overlapping sets of objects acquire their locks in the
same order and cannot deadlock. On SQLite ``select_for_update`` is a no-op; there the IMMEDIATE
transaction mode (settings) serialises writers instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from rms import fetch
from rms.models import MemoryObject, Namespace


def lock_select(ids: Iterable) -> fetch.Select:
    """PostgreSQL: lock the objects with these ids in primary-key order and read them (plain
    SQL, rows built without Model.__init__: the sweep locks 100k objects).

    Id arrays go in binary (``%b``): psycopg's text form of a uuid[] formats each id and runs a
    quoting regex over it, 1 µs an id; the binary form is its 16 bytes."""
    return fetch.Select(
        MemoryObject, "o", "o.id = ANY(%b::uuid[])", [list(set(ids))], " ORDER BY o.id FOR UPDATE"
    )


def attach_namespaces(objects: Iterable, namespaces: Iterable[Namespace] = ()) -> dict:
    """{id: object}, each object's namespace attached: the ones given, the (few) others read in
    one query, instead of a join that builds a namespace per row."""
    objects = list(objects)
    known = {ns.pk: ns for ns in namespaces}
    missing = {obj.namespace_id for obj in objects} - known.keys()
    namespaces = {**known, **(Namespace.objects.in_bulk(missing) if missing else {})}
    for obj in objects:
        obj._state.fields_cache["namespace"] = namespaces[obj.namespace_id]
    return {obj.pk: obj for obj in objects}


def lock_objects(ids: Iterable, *, namespaces: Iterable[Namespace] = ()) -> dict:
    """Lock the objects with these ids and return them by id (missing ids are simply absent).

    ``namespaces`` the caller already loaded are attached instead of read again.

    Rows that only their writers change under these locks (aggregates, tallies) must be read by
    a later statement, never joined here: in READ COMMITTED a statement that waited for a lock
    re-reads the locked row but keeps the joined rows of its own, older snapshot.
    """
    if connection.vendor == "postgresql":
        objects = lock_select(ids).run()
    else:
        objects = (
            MemoryObject.objects.filter(pk__in=sorted(set(ids), key=str))
            .order_by("pk")
            .select_for_update(of=("self",))
        )
    return attach_namespaces(objects, namespaces)
