"""What the aggregates add up to per namespace (SPEC §8, §10), object by object: the usage-ratio
histogram of the active objects with an injection (Σ usage ratio, count and review-queue count
per usage bin) and the all-time injection sums (Σ injections, Σ ended unused, Σ token cost of
the wasteful objects').

Pure: plain values in, plain values out (no Django). One object's share is a function of its
aggregate's values and whether it is DEPRECATED (:func:`contribution`); the live SQL forms
(``feedback.selectors.usage_bins``, ``feedback.object_rollup.lifetime_injection_part``) follow
the same rules, and a test pins them together. The overview's object count and confidence
histogram are counts by (namespace, epistemic type, confidence bin) (:func:`confidence_bin`),
kept and corrected the same way. ``feedback.window_rollup`` keeps the sums of
every object as its last run counted them and corrects them at read time for the objects that
may have changed since (the rolled sums, minus those objects as counted, plus them as they are).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from feedback.metrics import WASTE_USAGE_RATIO

#: The usage-ratio histogram's bins: [0, 0.1), …, [0.9, 1.0].
USAGE_BINS = 10
#: The review queue (SPEC §8): active objects injected this often and almost never used.
REVIEW_USAGE_BELOW = 0.10
REVIEW_MIN_INJECTIONS = 20
#: The "bin" of an object outside the usage histogram (DEPRECATED, or never injected): it still
#: counts in the all-time injection sums.
UNCOUNTED = -1


@dataclass(frozen=True, slots=True)
class BinSums:
    """The sums of the objects of one (namespace, usage bin)."""

    usage_sum: float = 0.0
    objects: int = 0
    queue: int = 0
    injections: int = 0
    unused: int = 0
    wasted: int = 0

    def __add__(self, other: BinSums) -> BinSums:
        return BinSums(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: BinSums) -> BinSums:
        return BinSums(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


def astuple(s: BinSums) -> tuple:
    return (s.usage_sum, s.objects, s.queue, s.injections, s.unused, s.wasted)


class Member(NamedTuple):
    """An object's aggregate values that the sums read, and whether it is DEPRECATED (a tuple:
    a run compares 100k of them with the stored ones)."""

    namespace_id: int
    usage_ratio: float | None
    total_injections: int
    unused_sessions: int
    total_token_cost: int
    deprecated: bool


def usage_bin(usage_ratio: float) -> int:
    """The histogram bin of a usage ratio (the last bin holds 1.0), as the live SQL bins it:
    ``LEAST(FLOOR(usage_ratio * USAGE_BINS), USAGE_BINS - 1)``."""
    return max(0, min(math.floor(usage_ratio * USAGE_BINS), USAGE_BINS - 1))


def wasteful(usage_ratio: float | None) -> bool:
    """SPEC §10: an object whose lifetime usage ratio is below 0.05 wastes what it is given."""
    return usage_ratio is not None and usage_ratio < WASTE_USAGE_RATIO


def in_review_queue(usage_ratio: float, total_injections: int) -> bool:
    return usage_ratio < REVIEW_USAGE_BELOW and total_injections >= REVIEW_MIN_INJECTIONS


def _share(m: Member) -> tuple[int, tuple]:
    """:func:`contribution` as a plain tuple (a run sums 100k of them)."""
    wasted = m.total_token_cost if wasteful(m.usage_ratio) else 0
    if m.deprecated or m.total_injections < 1 or m.usage_ratio is None:
        return UNCOUNTED, (0.0, 0, 0, m.total_injections, m.unused_sessions, wasted)
    queue = int(in_review_queue(m.usage_ratio, m.total_injections))
    return usage_bin(m.usage_ratio), (
        m.usage_ratio,
        1,
        queue,
        m.total_injections,
        m.unused_sessions,
        wasted,
    )


def contribution(m: Member) -> tuple[int, BinSums]:
    """(its bin, what it adds there) of one object: every aggregate counts in the injection
    sums; only an active object with ≥ 1 injection in the usage histogram (SPEC §10)."""
    b, share = _share(m)
    return b, BinSums(*share)


Sums = dict[int, dict[int, BinSums]]


def total(members: Iterable[Member]) -> Sums:
    """``{namespace id: {bin: BinSums}}`` of these objects (what a rollup run stores)."""
    acc: dict[tuple[int, int], list] = {}
    for m in members:
        b, share = _share(m)
        sums = acc.get((m.namespace_id, b))
        if sums is None:
            acc[(m.namespace_id, b)] = list(share)
        else:
            for k, v in enumerate(share):
                sums[k] += v
    out: Sums = {}
    for (ns_id, b), sums in acc.items():
        out.setdefault(ns_id, {})[b] = BinSums(*sums)
    return out


def corrected(stored: Sums, counted: Iterable[Member], current: Iterable[Member]) -> Sums:
    """The sums now: ``stored`` (a run's) minus the objects that may have changed as the run
    counted them (``counted``) plus the same objects as they are (``current``; an object
    without an aggregate now is not there)."""
    acc: dict[tuple[int, int], list] = {
        (ns_id, b): list(astuple(v)) for ns_id, bins in stored.items() for b, v in bins.items()
    }
    for sign, members in ((-1, counted), (1, current)):
        for m in members:
            b, share = _share(m)
            sums = acc.setdefault((m.namespace_id, b), [0.0, 0, 0, 0, 0, 0])
            for k, v in enumerate(share):
                sums[k] += sign * v
    out: Sums = {}
    for (ns_id, b), sums in acc.items():
        out.setdefault(ns_id, {})[b] = BinSums(*sums)
    return out


# --- the objects: count and confidence histogram -------------------------------------------------

#: The confidence histogram's bins: [0, 0.05), …, [0.95, 1.0].
CONFIDENCE_BINS = 20

#: An object as the overview counts it: (namespace id, epistemic type, confidence bin).
ObjectKey = tuple[int, str, int]
ObjectCounts = dict[ObjectKey, int]


def confidence_bin(confidence: float) -> int:
    """The confidence histogram bin (the last bin holds 1.0), as the live SQL bins it:
    ``LEAST(FLOOR(confidence * CONFIDENCE_BINS), CONFIDENCE_BINS - 1)``, at least 0."""
    return max(0, min(math.floor(confidence * CONFIDENCE_BINS), CONFIDENCE_BINS - 1))


def object_counts(keys: Iterable[ObjectKey]) -> ObjectCounts:
    """How many objects of each key (what a rollup run stores)."""
    out: ObjectCounts = {}
    for k in keys:
        out[k] = out.get(k, 0) + 1
    return out


def objects_corrected(
    stored: ObjectCounts, counted: Iterable[ObjectKey], current: Iterable[ObjectKey]
) -> ObjectCounts:
    """The counts now: ``stored`` (a run's) minus the objects that may have changed as the run
    counted them plus the same objects as they are (a new object was not counted)."""
    out = dict(stored)
    for sign, keys in ((-1, counted), (1, current)):
        for k in keys:
            out[k] = out.get(k, 0) + sign
    return {k: n for k, n in out.items() if n}


def lifetime(bins: dict[int, BinSums]) -> BinSums:
    """A namespace's all-time injection sums (the usage fields zero)."""
    out = BinSums()
    for part in bins.values():
        out += BinSums(injections=part.injections, unused=part.unused, wasted=part.wasted)
    return out


def usage_totals(bins: dict[int, BinSums]) -> BinSums:
    """A namespace's usage fields over its histogram's bins, added in bin order (SPEC §10's
    mean usage ratio and the review queue; the injection fields zero)."""
    out = BinSums()
    for b in range(USAGE_BINS):
        part = bins.get(b)
        if part is not None:
            out += BinSums(part.usage_sum, part.objects, part.queue)
    return out
