"""The filters and sort of an object listing, read from a query string.

One reading for the API's ``GET /objects`` and the dashboard's objects browser, so both accept
the same parameters with the same meaning. Pure: a mapping of strings in, an
:class:`ObjectQuery` and the errors of each bad parameter out. Applying it to a queryset is
``rms.selectors.object_list``; filters and sorts on what other apps keep beside an object (its
feedback aggregate) are registered by those apps (``rms.extensions.register_object_filter``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from rms import policy

#: Columns an object listing sorts by that ``rms`` owns; apps add theirs (usage ratio...).
CORE_SORTS = {"created_at": "created_at", "confidence": "confidence"}
DEFAULT_SORT = "created_at"
#: Longest text search accepted; a longer one is a 400, not a slow scan.
MAX_TEXT = 200
#: Boolean filters answered by an app's registered filter, e.g. ``in_alert``.
BOOLEAN_VALUES = {"true": True, "false": False}


@dataclass(frozen=True)
class ObjectQuery:
    namespace: str | None = None
    epistemic_type: str | None = None
    pinned: bool | None = None
    confidence_min: float | None = None
    confidence_max: float | None = None
    text: str | None = None
    #: Values of the filters apps registered (``usage_ratio_min``, ``in_alert``...), parsed.
    extra: dict = field(default_factory=dict)
    sort: str = DEFAULT_SORT
    descending: bool = False

    @property
    def default_order(self) -> bool:
        return self.sort == DEFAULT_SORT and not self.descending


def _unit(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError
    return value


def parse(
    params: Mapping,
    *,
    unit_filters: tuple[str, ...] = (),
    bool_filters: tuple[str, ...] = (),
    sorts: tuple[str, ...] = (),
) -> tuple[ObjectQuery, dict[str, list[str]]]:
    """The query in ``params`` and ``{parameter: [message]}`` for each bad one (the API
    answers 400 with them, the dashboard shows them and leaves a bad value out).
    ``unit_filters`` and ``bool_filters`` name the registered filters taking a number in
    [0, 1] or true/false; ``sorts`` the registered sort keys. ``sort`` is a key,
    ``-key`` for descending; ``dir=desc`` also reverses it (the dashboard's column links)."""
    errors: dict[str, list[str]] = {}
    values: dict = {}

    def text_of(name: str) -> str | None:
        raw = params.get(name)
        return raw.strip() if isinstance(raw, str) and raw.strip() else None

    if ns := text_of("namespace"):
        values["namespace"] = ns
    if etype := text_of("epistemic_type"):
        if etype in policy.EPISTEMIC_TYPES:
            values["epistemic_type"] = etype
        else:
            errors["epistemic_type"] = ["Unknown epistemic type."]
    if pinned := text_of("pinned"):
        if pinned in BOOLEAN_VALUES:
            values["pinned"] = BOOLEAN_VALUES[pinned]
        else:
            errors["pinned"] = ["Must be true or false."]
    extra: dict = {}
    for name in ("confidence_min", "confidence_max", *unit_filters):
        if (raw := text_of(name)) is None:
            continue
        try:
            value = _unit(raw)
        except ValueError:
            errors[name] = ["Must be a number in [0, 1]."]
            continue
        if name.startswith("confidence_"):
            values[name] = value
        else:
            extra[name] = value
    for name in bool_filters:
        if (raw := text_of(name)) is None:
            continue
        if raw in BOOLEAN_VALUES:
            extra[name] = BOOLEAN_VALUES[raw]
        else:
            errors[name] = ["Must be true or false."]
    if text := text_of("q"):
        if len(text) > MAX_TEXT:
            errors["q"] = [f"At most {MAX_TEXT} characters."]
        else:
            values["text"] = text
    for low, high in (("confidence_min", "confidence_max"), ("usage_ratio_min", "usage_ratio_max")):
        lo = values.get(low, extra.get(low))
        hi = values.get(high, extra.get(high))
        if lo is not None and hi is not None and lo > hi:
            errors[low] = [f"Must not be above {high}."]
    if sort := text_of("sort"):
        descending = sort.startswith("-")
        key = sort[1:] if descending else sort
        if key in CORE_SORTS or key in sorts:
            values["sort"] = key
            values["descending"] = descending or params.get("dir") == "desc"
        else:
            allowed = ", ".join(sorted({*CORE_SORTS, *sorts}))
            errors["sort"] = [f"Must be one of {allowed}, optionally prefixed by '-'."]
    return ObjectQuery(extra=extra, **values), errors
