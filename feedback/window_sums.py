"""The windowed sums of the quality metrics (SPEC §10) from the hourly rollup: which part of a
window is read from the rollup and which is computed live, and how the parts add up.

Pure: plain values in, plain values out (no Django), so the selectors, the rollup and the tests
share one reading of a window. ``feedback.window_rollup`` keeps the hours and reads the parts.

A window's sums are the sums of disjoint parts:

- *rolled*: the whole hours of the window before the rollup's mark, read from the hour rows;
- *late*: rows of those hours the rollup has not seen yet (recorded after its run with an older
  ts; found by id beyond its mark);
- *correction*: the token cost of the rolled hours' injections of objects that are wasteful now
  but were not when the rollup summed them, minus that of objects that were and are not now
  ("wasted" counts the objects below ``WASTE_USAGE_RATIO`` *now*, SPEC §10);
- *live*: the partial first hour, the hours after the mark and whatever the rollup may not
  cover (before a retention cut it has not caught up with), computed from the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

#: The rollup's unit: a window's live part is at most its first partial hour and the hours
#: after the mark (docs/DECISIONS.md: days would leave up to three days of injections live).
HOUR = timedelta(hours=1)
#: The selectors' windows include their end; the parts are half-open, [lo, hi).
TICK = timedelta(microseconds=1)

Range = tuple[datetime | None, datetime | None]


@dataclass(frozen=True)
class Sums:
    """The sums of one part of a window of one namespace: its sessions (count, with a
    correction, Σ context_budget) and injections (count, ended unused, Σ wasted token cost)."""

    sessions: int = 0
    corrected: int = 0
    budget: int = 0
    injections: int = 0
    unused: int = 0
    wasted: int = 0

    def __add__(self, other: Sums) -> Sums:
        return Sums(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Sums)))


def merge(parts: Iterable[tuple[int, Sums]]) -> dict[int, Sums]:
    """``{namespace id: Σ its parts}``; a namespace without parts has no entry."""
    out: dict[int, Sums] = {}
    for ns_id, part in parts:
        out[ns_id] = out.get(ns_id, Sums()) + part
    return out


def session_row(ns_id: int, s: Sums) -> dict:
    """The row ``feedback.selectors.session_sums`` gives for a namespace."""
    return {"namespace_id": ns_id, "n": s.sessions, "corrected": s.corrected, "budget": s.budget}


def injection_row(ns_id: int, s: Sums) -> dict:
    """The row ``feedback.selectors.injection_sums`` gives for a namespace."""
    return {"namespace_id": ns_id, "n": s.injections, "unused": s.unused, "wasted": s.wasted}


def floor_hour(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def ceil_hour(ts: datetime) -> datetime:
    start = floor_hour(ts)
    return start if start == ts else start + HOUR


@dataclass(frozen=True)
class Plan:
    """Where one namespace's window comes from: ``rolled`` the hours [lo, hi) read from the
    rollup (lo None: from its first hour), or None; ``live`` the half-open ranges computed
    from the rows (None: open). Together they are exactly the window."""

    rolled: Range | None
    live: tuple[Range, ...]


def plan(
    since: datetime | None,
    until: datetime | None,
    through: datetime | None,
    floor: datetime | None = None,
) -> Plan:
    """The parts of the window [since, until] (both included, None: open) given a rollup whose
    hours before ``through`` are summed (None: no rollup) and may not be read before ``floor``
    (rows there were deleted after they were summed, None: no such cut)."""
    end = None if until is None else until + TICK
    whole = Plan(None, ((since, end),))
    if through is None:
        return whole
    lo = None if since is None else ceil_hour(since)
    if floor is not None:
        lo = floor if lo is None else max(lo, floor)
    hi = through if end is None else min(through, floor_hour(end))
    if lo is not None and lo >= hi:
        return whole
    live: list[Range] = []
    if lo is not None and (since is None or since < lo):
        live.append((since, lo))
    if end is None or hi < end:
        live.append((hi, end))
    return Plan((lo, hi), tuple(live))
