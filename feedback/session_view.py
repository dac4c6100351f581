"""What a reader limited to some namespaces may see of a feedback session's record.

A session's scope may span namespaces, but a reader sees only the parts about objects it may
read: the ids, signals and unused ids of objects in other namespaces are left out, as are the
other namespaces of the scope. The session's mean STR is computed over every injection, so it
is withheld from a partial view (``partial: true``). Pure: plain dicts in, plain dicts out.
"""

from __future__ import annotations

from collections.abc import Collection


def object_ids(record: dict) -> set[str]:
    """Every object id the record names."""
    ids = set(record.get("injected_object_ids") or ())
    ids.update(record.get("unused_ids") or ())
    ids.update(s["object_id"] for s in record.get("signals") or () if "object_id" in s)
    return ids


def record_for_reader(
    record: dict, readable_ids: Collection[str], readable_namespaces: Collection[str]
) -> dict:
    """``record`` restricted to ``readable_ids`` and ``readable_namespaces``; the same dict when
    nothing is hidden, else a copy marked ``partial: true``."""
    if object_ids(record) <= set(readable_ids) and set(record.get("namespace_scope") or ()) <= set(
        readable_namespaces
    ):
        return record
    out = dict(record)
    out["namespace_scope"] = [n for n in record["namespace_scope"] if n in readable_namespaces]
    out["injected_object_ids"] = [i for i in record["injected_object_ids"] if i in readable_ids]
    out["signals"] = [s for s in record["signals"] if s.get("object_id") in readable_ids]
    out["unused_ids"] = [i for i in record["unused_ids"] if i in readable_ids]
    out["session_str_mean"] = None
    out["partial"] = True
    return out
