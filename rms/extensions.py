"""Extension points through which apps built on ``rms`` add to its answers.

``rms`` never imports ``feedback`` (STYLE: arrows go one way); instead ``feedback`` registers a
provider here in ``AppConfig.ready`` that returns each object's ``aggregate`` in one query.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

ObjectExtra = Callable[[list], dict]  # objects -> {object_id: {"key": value, ...}}

_object_extras: list[ObjectExtra] = []


def register_object_extra(provider: ObjectExtra) -> None:
    if provider not in _object_extras:
        _object_extras.append(provider)


def object_extras(objects: Iterable) -> dict:
    objects = list(objects)
    merged: dict = {obj.pk: {} for obj in objects}
    for provider in _object_extras:
        for object_id, extra in provider(objects).items():
            merged.setdefault(object_id, {}).update(extra)
    return merged


HealthExtra = Callable[[], object]  # () -> a JSON value, e.g. {"state": "ok", ...}

_health_extras: dict[str, HealthExtra] = {}


def register_health_extra(name: str, provider: HealthExtra) -> None:
    """Adds ``name`` to /health's answer (run with the dependency checks, within their
    deadline); informational: it does not change the status code."""
    _health_extras[name] = provider


def health_extras() -> dict[str, HealthExtra]:
    return dict(_health_extras)


# Filters and sort keys of object listings on what an app keeps beside an object (the feedback
# aggregate's usage ratio...): ``name -> (kind, value -> Q)`` with kind "unit" (a number in
# [0, 1]) or "bool", and ``name -> ORM field path``. Read by ``rms.selectors.object_list``.
ObjectFilter = Callable[[object], object]  # parsed value -> django.db.models.Q

_object_filters: dict[str, tuple[str, ObjectFilter]] = {}
_object_sorts: dict[str, str] = {}


def register_object_filter(name: str, kind: str, to_q: ObjectFilter) -> None:
    if kind not in ("unit", "bool"):
        raise ValueError(f"Unknown object filter kind {kind!r}.")
    _object_filters[name] = (kind, to_q)


def register_object_sort(name: str, field_path: str) -> None:
    _object_sorts[name] = field_path


def object_filters() -> dict[str, tuple[str, ObjectFilter]]:
    return dict(_object_filters)


def object_sorts() -> dict[str, str]:
    return dict(_object_sorts)


# A namespace's retrieval profile as ``/rank`` answers it (its weights and rules over the
# defaults): the payload of the PROFILE_CHANGED operation the namespace API writes when they
# change. ``feedback`` scores with the profile, so it provides this; None (no provider, or an
# invalid stored profile) writes no operation.
NamespaceProfile = Callable[[object], "dict | None"]  # Namespace -> profile_out or None

_namespace_profile: list[NamespaceProfile] = []


def register_namespace_profile(provider: NamespaceProfile) -> None:
    _namespace_profile[:] = [provider]


def namespace_profile(ns) -> dict | None:
    return _namespace_profile[0](ns) if _namespace_profile else None
