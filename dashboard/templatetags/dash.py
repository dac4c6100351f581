"""Formatting for the dashboard: UTC times with relative time on hover, ratios to 3 decimals,
state labels (colour and text), sortable headers and URLs that keep their filters."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil

register = template.Library()

#: Two digit runs joined by an underscore in a result key: a decimal number.
DECIMAL_IN_KEY = re.compile(r"(?<![0-9A-Za-z])([0-9]+)_([0-9]+)(?![0-9A-Za-z])")

STATE_LABELS = {"ok": "OK", "alert": "Alert", "no_data": "No data"}
STATE_ICONS = {"ok": "✓", "alert": "!", "no_data": "–"}


def relative(value: datetime, now: datetime | None = None) -> str:
    now = now or timezone.now()
    if value <= now:
        delta = now - value
        if delta.total_seconds() < 60:
            return "just now"
        return f"{timesince(value, now, depth=1)} ago"
    return f"in {timeuntil(value, now, depth=1)}"


@register.filter
def ts(value, fmt: str = "minutes"):
    """``<time>`` in UTC, with the relative time as its tooltip."""
    if not value:
        return mark_safe('<span class="muted">—</span>')
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    utc = value.astimezone(UTC)
    shown = {
        "seconds": "%Y-%m-%d %H:%M:%S",
        "minutes": "%Y-%m-%d %H:%M",
        "date": "%Y-%m-%d",
        "time": "%H:%M:%S",
    }.get(fmt, "%Y-%m-%d %H:%M")
    return format_html(
        '<time datetime="{}" title="{}">{}<span class="utc"> UTC</span></time>',
        utc.isoformat(),
        relative(utc),
        utc.strftime(shown),
    )


@register.filter
def ratio(value, digits: int = 3):
    if value is None or value == "":
        return "—"
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def pct(value, digits: int = 1):
    if value is None:
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def num(value):
    if value is None or value == "":
        return "—"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value


@register.filter
def get(mapping, key):
    if mapping is None:
        return None
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def short_hash(value: str, n: int = 10) -> str:
    return (value or "")[: int(n)]


@register.filter
def humanize_key(value: str) -> str:
    """``single_from_0_06`` → ``single from 0.06``: digits joined by ``_`` are a number (result
    keys cannot hold a dot), the other underscores are spaces."""
    return DECIMAL_IN_KEY.sub(r"\1.\2", str(value)).replace("_", " ")


@register.simple_tag
def state_pill(state: str, label: str | None = None):
    """The state in colour and in words (colour-blind operators read the word)."""
    state = state if state in STATE_LABELS else "no_data"
    return format_html(
        '<span class="pill pill-{}"><span class="pill-icon" aria-hidden="true">{}</span>{}</span>',
        state.replace("_", "-"),
        STATE_ICONS[state],
        label or STATE_LABELS[state],
    )


@register.simple_tag(takes_context=True)
def query(context, **changes) -> str:
    """The current query string with ``changes`` applied (None removes a key); any change other
    than the page itself goes back to page 1."""
    request = context["request"]
    params = request.GET.copy()
    if "page" not in changes:
        params.pop("page", None)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag(takes_context=True)
def sort_th(context, key: str, label: str, numeric: bool = False, default_desc: bool = False):
    """A sortable column header: a link that sorts by ``key`` (again: reverses), with aria-sort."""
    request = context["request"]
    current = context.get("sort")
    descending = context.get("descending", False)
    active = current == key
    if active:
        next_dir = "asc" if descending else "desc"
        aria = "descending" if descending else "ascending"
        arrow = "↓" if descending else "↑"
    else:
        next_dir = "desc" if default_desc else "asc"
        aria = "none"
        arrow = ""
    params = request.GET.copy()
    params.pop("page", None)
    params["sort"] = key
    params["dir"] = next_dir
    return format_html(
        '<th scope="col" class="{}" aria-sort="{}"><a class="sort{}" href="?{}">{}'
        '<span class="arrow" aria-hidden="true">{}</span></a></th>',
        "num" if numeric else "",
        aria,
        " active" if active else "",
        params.urlencode(),
        label,
        arrow,
    )


@register.filter
def direction_sign(direction: str) -> str:
    return "<" if direction == "below" else ">"


@register.simple_tag
def elided_pages(page) -> list:
    return list(page.paginator.get_elided_page_range(page.number, on_each_side=1, on_ends=1))


def _compact(value, depth: int = 0) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        if len(value) <= 4 or depth > 0:
            return (
                "["
                + ", ".join(_compact(v, depth + 1) for v in value[:4])
                + (", …]" if len(value) > 4 else "]")
            )
        first, last = _compact(value[0], depth + 1), _compact(value[-1], depth + 1)
        return f"{first} → {last} ({len(value)} values)"
    if isinstance(value, dict):
        inner = ", ".join(
            f"{k.replace('_', ' ')} {_compact(v, depth + 1)}" for k, v in value.items()
        )
        return f"({inner})" if depth else inner
    return str(value)


@register.filter
def compact(value) -> str:
    """A measured value in a few characters: ratios to 3 decimals, long series as first → last."""
    return _compact(value)


@register.filter
def signed(value, digits: int = 3):
    """A change with its sign, "+0.042" / "−0.013" (a true minus); "—" when there is none."""
    if value is None or value == "":
        return "—"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    text = f"{abs(v):.{int(digits)}f}"
    if float(text) == 0.0:
        return f"±{text}"
    return f"+{text}" if v > 0 else f"−{text}"
