"""Reads of suppressed memories: a namespace's eligible objects that cannot surface
(``feedback.suppression`` holds the rules)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from datetime import datetime

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from feedback import retrieval, suppression, utility
from feedback.selectors import namespace_profile
from rms.errors import DomainError
from rms.models import MemoryObject, Namespace
from rms.policy import DEPRECATED

#: Rows fetched at a time from the database while reading a namespace's objects.
CHUNK = 5000
#: The columns of an object and its aggregate that its ranking inputs need, in
#: ``retrieval.RankingInputs`` order after the id.
_COLUMNS = (
    "id",
    "epistemic_type",
    "condition_state",
    "confidence",
    "salience_base",
    "reinforcement_boost",
    "decay_profile",
    "pinned",
    "last_reinforced_at",
    "created_at",
    "aggregate__utility",
    "aggregate__uses",
    "aggregate__last_use_at",
)


def suppressed_in(
    ns: Namespace,
    now: datetime,
    *,
    salience_below: float = suppression.DEFAULT_SALIENCE_BELOW,
    k: int = suppression.DEFAULT_K,
) -> tuple[retrieval.Profile, list[suppression.Finding]]:
    """The namespace's profile and its suppressed objects, most buried first (lowest best
    score, then id). One pass over the namespace's active objects, read as plain columns (no
    model instances: at 90k objects those cost most of the time). 409 when the stored profile
    is invalid."""
    profile = namespace_profile(ns)
    rows = (
        MemoryObject.objects.filter(namespace=ns)
        .exclude(epistemic_type=DEPRECATED)
        .values_list(*_COLUMNS)
        .iterator(chunk_size=CHUNK)
    )

    def inputs():
        for oid, *state, util, uses, last_use in rows:
            yield (
                str(oid),
                retrieval.RankingInputs(
                    *state,
                    # No aggregate yet: what ``ranking_inputs`` gives an object never injected.
                    utility=utility.UTILITY_START if util is None else util,
                    uses=uses or 0,
                    last_use_at=last_use,
                ),
            )

    findings = suppression.suppressed(inputs(), profile, now, salience_below=salience_below, k=k)
    findings.sort(key=lambda f: (f.best_score, f.object_id))
    return profile, findings


def with_objects(findings: list[suppression.Finding]) -> list[dict]:
    """``{"object": MemoryObject, "finding": Finding}`` for one page of findings, in order."""
    objects = MemoryObject.objects.in_bulk([f.object_id for f in findings])
    by_id = {str(pk): obj for pk, obj in objects.items()}
    return [{"object": by_id[f.object_id], "finding": f} for f in findings if f.object_id in by_id]


# --- The served listing: computed on the worker ahead, cached per namespace -----------------
#
# Scoring a namespace takes seconds at tens of thousands of objects (docs/PERFORMANCE.md), so a
# request without ``as_of`` is answered from a listing computed at most
# ``RMS_SUPPRESSED_CACHE_SECONDS`` ago by the same ``suppressed_in`` (never a second set of
# rules), and says when: its ``now`` is the clock it was computed at. ``dashboard.tasks.
# warm_suppressed`` recomputes the listings someone asked for recently, ahead of expiry, so a
# watched namespace never meets a cold cache. A request with ``as_of`` is computed live.

#: Listings asked for recently: {(namespace uid, salience_below, k): last asked, epoch s}.
WATCHED_KEY = "suppressed:watched"
#: How long a listing stays warmed after it was last asked for.
WATCHED_SECONDS = 15 * 60


@dataclass(frozen=True)
class Listing:
    profile: retrieval.Profile
    #: The clock of decay and hotness: the time the listing was computed.
    now: datetime
    findings: Sequence[suppression.Finding]
    #: True when served from the worker's (or an earlier request's) computation.
    cached: bool


class _Findings(Sequence):
    """Cached findings as plain tuples (compact to store), made Findings only when read."""

    def __init__(self, rows: list[tuple]):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [suppression.Finding(*row) for row in self._rows[index]]
        return suppression.Finding(*self._rows[index])


def _cache_key(ns: Namespace, profile: retrieval.Profile, salience_below: float, k: int) -> str:
    # The profile is part of the key: a changed profile is a new listing at once.
    digest = hashlib.sha256(
        json.dumps(retrieval.profile_out(profile), sort_keys=True).encode()
    ).hexdigest()[:16]
    return f"suppressed:v1:{ns.uid}:{salience_below!r}:{k}:{digest}"


def _compute(ns: Namespace, key: str, salience_below: float, k: int) -> tuple:
    """Score the namespace now and store the listing under ``key``: (clock, finding tuples)."""
    now = timezone.now()
    _, found = suppressed_in(ns, now, salience_below=salience_below, k=k)
    entry = (now, [astuple(f) for f in found])
    cache.set(key, entry, settings.RMS_SUPPRESSED_CACHE_SECONDS)
    return entry


def _watch(ns: Namespace, salience_below: float, k: int) -> None:
    watched = cache.get(WATCHED_KEY) or {}
    cutoff = time.time() - WATCHED_SECONDS
    watched = {key: at for key, at in watched.items() if at >= cutoff}
    watched[(str(ns.uid), salience_below, k)] = time.time()
    cache.set(WATCHED_KEY, watched, WATCHED_SECONDS)


def listing(
    ns: Namespace,
    as_of: datetime | None = None,
    *,
    salience_below: float = suppression.DEFAULT_SALIENCE_BELOW,
    k: int = suppression.DEFAULT_K,
    refresh: bool = False,
) -> Listing:
    """The namespace's suppressed objects, most buried first: at ``as_of``, computed now;
    without it, the cached listing (computed on a miss, or when ``refresh``). 409 when the
    stored profile is invalid."""
    profile = namespace_profile(ns)
    if as_of is not None:
        _, found = suppressed_in(ns, as_of, salience_below=salience_below, k=k)
        return Listing(profile, as_of, found, cached=False)
    _watch(ns, salience_below, k)
    key = _cache_key(ns, profile, salience_below, k)
    entry = None if refresh else cache.get(key)
    cached = entry is not None
    if entry is None:
        entry = _compute(ns, key, salience_below, k)
    now, rows = entry
    return Listing(profile, now, _Findings(rows), cached=cached)


def warm() -> int:
    """Recompute every listing asked for in the last ``WATCHED_SECONDS`` (the beat task);
    returns how many. Read-only and idempotent: a duplicate run recomputes the same listing."""
    watched = cache.get(WATCHED_KEY) or {}
    cutoff = time.time() - WATCHED_SECONDS
    wanted = [key for key, at in watched.items() if at >= cutoff]
    uids = {uid for uid, _, _ in wanted}
    by_uid = {str(ns.uid): ns for ns in Namespace.objects.filter(uid__in=uids)}
    done = 0
    for uid, salience_below, k in wanted:
        ns = by_uid.get(uid)
        if ns is None:
            continue
        try:
            profile = namespace_profile(ns)
        except DomainError:
            continue  # an invalid profile: the request answers 409, nothing to warm
        _compute(ns, _cache_key(ns, profile, salience_below, k), salience_below, k)
        done += 1
    return done
