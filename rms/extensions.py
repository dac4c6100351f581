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
