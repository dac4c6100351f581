"""Reads of suppressed memories: a namespace's eligible objects that cannot surface
(``feedback.suppression`` holds the rules)."""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
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
from taskruns import enqueue

logger = logging.getLogger(__name__)

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


# --- The served listing: computed on the worker, never on a large namespace's request ------
#
# Scoring a namespace takes seconds at tens of thousands of objects (docs/PERFORMANCE.md), so a
# request is answered from a listing computed by the same ``suppressed_in`` (never a second set
# of rules) and stored in the cache, and says when (``computed_at``; ``now`` is its clock).
# A namespace of at most ``RMS_SUPPRESSED_INLINE_OBJECTS`` active objects is scored on the
# request when nothing fits (a bounded cost); a larger one only on the worker: a listing older
# than ``RMS_SUPPRESSED_CACHE_SECONDS`` is served as it is, marked ``stale``, while the worker
# recomputes it (stale-while-revalidate), and with no listing at all the request gets
# ``ListingPending`` (the API's 202 with Retry-After). The last listing is kept
# ``RMS_SUPPRESSED_KEEP_SECONDS``. ``warm`` (beat) recomputes the listings asked for recently
# and every namespace's default listing, so a miss is rare.

#: Listings asked for recently: {(namespace uid, salience_below, k): last asked, epoch s}.
WATCHED_KEY = "suppressed:watched"
#: How long a listing stays warmed after it was last asked for.
WATCHED_SECONDS = 15 * 60
#: At most this many listings per namespace are warmed, the most recently asked (each one is a
#: full scoring of the namespace per beat run, so a client sending many distinct bars must not
#: multiply the worker's load; a listing past the cap is still served and recomputed on ask).
WATCHED_PER_NAMESPACE = 4
#: How long a queued computation blocks queueing the same one again (a lost message or a
#: dead worker frees it after this).
QUEUED_SECONDS = 10 * 60
#: Held while ``warm`` runs; expires by itself if its worker dies.
WARMING_KEY = "suppressed:warming"
WARMING_SECONDS = 30 * 60
#: Seconds a client is told to wait before asking again for a listing being computed.
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Listing:
    profile: retrieval.Profile
    #: The clock of decay and hotness: ``as_of``, or the time the listing was computed.
    now: datetime
    findings: Sequence[suppression.Finding]
    #: True when served from the worker's (or an earlier request's) computation.
    cached: bool
    #: When the objects were read and scored.
    computed_at: datetime | None = None
    #: True when older than ``RMS_SUPPRESSED_CACHE_SECONDS`` (a recomputation is queued).
    stale: bool = False
    #: True when a recomputation on the worker is queued or running.
    refreshing: bool = False


class ListingPending(Exception):
    """No stored listing answers the request and the namespace is too large to score on it:
    its computation is queued on the worker; ask again after ``retry_after`` seconds."""

    def __init__(self, retry_after: int = RETRY_AFTER_SECONDS):
        super().__init__(f"the listing is being computed; retry after {retry_after} s")
        self.retry_after = retry_after


#: Findings stored per cache value. A page reads the listing's head and the one or two blocks
#: it spans, not all of a namespace's tens of thousands of findings.
BLOCK = 1000
#: Seconds a recomputed listing's blocks stay readable after its head was replaced.
SUPERSEDED_SECONDS = 60


class _Findings(Sequence):
    """A stored listing's findings, read block by block from the cache on slicing (stored as
    plain tuples, compact; made Findings only when read). A block gone from the cache (evicted)
    raises ``ListingPending``, and the head, if still this listing's, is dropped so the next
    request recomputes."""

    def __init__(self, key: str, head: tuple):
        self._key = key
        self._stamp, self._count = head[3], head[2]

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        if not isinstance(index, slice):
            found = self[index : index + 1] if index >= 0 else self[index:][:1]
            if not found:
                raise IndexError(index)
            return found[0]
        start, stop, step = index.indices(self._count)
        if start >= stop:
            return []
        first, last = start // BLOCK, (stop - 1) // BLOCK
        keys = [_block_key(self._key, self._stamp, i) for i in range(first, last + 1)]
        blocks = cache.get_many(keys)
        if len(blocks) != len(keys):
            head = cache.get(self._key)
            if head is not None and head[3] == self._stamp:
                cache.delete(self._key)  # still this listing: the next request recomputes
            raise ListingPending()
        rows = [row for k in keys for row in blocks[k]]
        offset = first * BLOCK
        return [suppression.Finding(*row) for row in rows[start - offset : stop - offset : step]]


def _block_key(key: str, stamp: str, i: int) -> str:
    return f"{key}:{stamp}:{i}"


def _cache_key(
    ns: Namespace,
    profile: retrieval.Profile,
    salience_below: float,
    k: int,
    as_of: datetime | None = None,
) -> str:
    # The profile is part of the key: a changed profile is a new listing at once.
    digest = hashlib.sha256(
        json.dumps(retrieval.profile_out(profile), sort_keys=True).encode()
    ).hexdigest()[:16]
    key = f"suppressed:v2:{ns.uid}:{salience_below!r}:{k}:{digest}"
    return key if as_of is None else f"{key}:at:{as_of.isoformat()}"


def _compute(
    ns: Namespace, key: str, salience_below: float, k: int, as_of: datetime | None = None
) -> tuple:
    """Score the namespace at ``as_of`` (default: now) and store the listing under ``key``:
    returns its head (clock, computed at, count, stamp of its blocks)."""
    computed_at = timezone.now()
    clock = computed_at if as_of is None else as_of
    _, found = suppressed_in(ns, clock, salience_below=salience_below, k=k)
    rows = [astuple(f) for f in found]
    stamp = uuid.uuid4().hex[:12]
    # The head last, so a reader never finds a head whose blocks are not stored yet; blocks
    # are named by the computation, so an earlier head's reader keeps reading its own.
    head = (clock, computed_at, len(rows), stamp)
    # A listing at ``as_of`` is only asked for by the client polling for it: kept as long as a
    # fresh one; the current listing is kept longer, to be served stale while recomputed.
    keep = (
        settings.RMS_SUPPRESSED_KEEP_SECONDS
        if as_of is None
        else settings.RMS_SUPPRESSED_CACHE_SECONDS
    )
    blocks = {
        _block_key(key, stamp, i // BLOCK): rows[i : i + BLOCK] for i in range(0, len(rows), BLOCK)
    }
    previous = cache.get(key)
    # A block outlives its head, so a head read just before it expires still finds them.
    cache.set_many(blocks, keep + SUPERSEDED_SECONDS)
    cache.set(key, head, keep)
    if previous is not None and previous[3] != stamp:
        # The superseded listing's blocks: gone shortly (not at once: a request that read the
        # old head a moment ago still reads its page), not kept for days per recomputation.
        for i in range(-(-previous[2] // BLOCK)):
            cache.touch(_block_key(key, previous[3], i), SUPERSEDED_SECONDS)
    return head


def compute(ns_uid: str, salience_below: float, k: int, as_of: datetime | None = None) -> bool:
    """The worker's side (``dashboard.tasks.compute_suppressed``): score the namespace with its
    current profile and store the listing; False when the namespace is gone or its profile is
    invalid (the request answers 409 for it). Idempotent: a rerun stores the same listing."""
    ns = Namespace.objects.filter(uid=ns_uid).first()
    if ns is None:
        return False
    try:
        profile = namespace_profile(ns)
    except DomainError:
        return False
    key = _cache_key(ns, profile, salience_below, k, as_of)
    try:
        _compute(ns, key, salience_below, k, as_of)
    finally:
        cache.delete(f"{key}:queued")
    return True


def _queue(ns: Namespace, key: str, salience_below: float, k: int, as_of) -> bool:
    """Queue the listing's computation on the worker unless already queued; True when it is
    queued (now or before)."""
    flag = f"{key}:queued"
    if not cache.add(flag, 1, QUEUED_SECONDS):
        return True
    try:
        enqueue.compute_suppressed(
            str(ns.uid), salience_below, k, None if as_of is None else as_of.isoformat()
        )
    except Exception:  # a broker outage: the request still answers what is stored
        logger.exception("could not queue the suppressed listing of %s", ns.name)
        cache.delete(flag)
        return False
    return True


def _small(ns: Namespace) -> bool:
    """At most ``RMS_SUPPRESSED_INLINE_OBJECTS`` active objects: cheap enough to score on the
    request. Counts at most one past the bar, so the check costs the same at any size."""
    limit = settings.RMS_SUPPRESSED_INLINE_OBJECTS
    active = MemoryObject.objects.filter(namespace=ns).exclude(epistemic_type=DEPRECATED)
    return active[: limit + 1].count() <= limit


def _watch(ns: Namespace, salience_below: float, k: int) -> None:
    watched = cache.get(WATCHED_KEY) or {}
    cutoff = time.time() - WATCHED_SECONDS
    watched = {key: at for key, at in watched.items() if at >= cutoff}
    uid = str(ns.uid)
    watched[(uid, salience_below, k)] = time.time()
    mine = sorted((key for key in watched if key[0] == uid), key=watched.get, reverse=True)
    for key in mine[WATCHED_PER_NAMESPACE:]:
        del watched[key]
    cache.set(WATCHED_KEY, watched, WATCHED_SECONDS)


def listing(
    ns: Namespace,
    as_of: datetime | None = None,
    *,
    salience_below: float = suppression.DEFAULT_SALIENCE_BELOW,
    k: int = suppression.DEFAULT_K,
    refresh: bool = False,
) -> Listing:
    """The namespace's suppressed objects, most buried first, at ``as_of`` (default: the
    stored listing's clock). Answered from a stored listing when one fits: without ``as_of``
    the namespace's last listing (recomputed when older than ``RMS_SUPPRESSED_CACHE_SECONDS``
    or when ``refresh``), with it a listing computed at exactly that clock (the current
    listing's own ``now``, or one computed for ``as_of``). Otherwise a small namespace is scored
    here; a large one is queued on the worker, and the stored listing is served ``stale`` or,
    with none, ``ListingPending`` is raised. 409 when the stored profile is invalid."""
    profile = namespace_profile(ns)
    if as_of is None:
        _watch(ns, salience_below, k)
    current = _cache_key(ns, profile, salience_below, k)
    key = current if as_of is None else _cache_key(ns, profile, salience_below, k, as_of)
    # ``source``: the key the listing's head is read from (its blocks are named after it).
    entry, source = cache.get(key), key
    if entry is None and as_of is not None:
        # The current listing is exact at its own clock (a client asking again at ``now``).
        latest = cache.get(current)
        if latest is not None and latest[0] == as_of:
            entry, source = latest, current
    aged = (
        entry is not None
        and as_of is None
        and (timezone.now() - entry[1]).total_seconds() > settings.RMS_SUPPRESSED_CACHE_SECONDS
    )
    cached, refreshing = entry is not None, False
    if entry is None or aged or refresh:
        if _small(ns):
            entry, cached, aged = _compute(ns, key, salience_below, k, as_of), False, False
            source = key
        else:
            refreshing = _queue(ns, key, salience_below, k, as_of)
            if entry is None:
                raise ListingPending()
    clock, computed_at = entry[0], entry[1]
    return Listing(
        profile,
        clock,
        _Findings(source, entry),
        cached=cached,
        computed_at=computed_at,
        stale=aged,
        refreshing=refreshing,
    )


def warm() -> int:
    """Recompute every listing asked for in the last ``WATCHED_SECONDS`` and every namespace's
    default listing older than ``RMS_SUPPRESSED_IDLE_SECONDS`` or missing (the beat task);
    returns how many. Read-only and idempotent; one run at a time (a run that outlasts the beat
    period makes the next one a no-op instead of a second pass over the same namespaces)."""
    if not cache.add(WARMING_KEY, 1, WARMING_SECONDS):
        return 0
    try:
        return _warm()
    finally:
        cache.delete(WARMING_KEY)


def _warm() -> int:
    watched = cache.get(WATCHED_KEY) or {}
    cutoff = time.time() - WATCHED_SECONDS
    wanted = {key for key, at in watched.items() if at >= cutoff}
    namespaces = {str(ns.uid): ns for ns in Namespace.objects.order_by("name")}
    now = timezone.now()
    done = 0
    for uid, ns in namespaces.items():
        default = (uid, suppression.DEFAULT_SALIENCE_BELOW, suppression.DEFAULT_K)
        for_ns = sorted(key for key in wanted if key[0] == uid)
        if default not in wanted:
            for_ns.append(default)
        try:
            profile = namespace_profile(ns)
        except DomainError:
            continue  # an invalid profile: the request answers 409, nothing to warm
        for listing_key in for_ns:
            _, salience_below, k = listing_key
            key = _cache_key(ns, profile, salience_below, k)
            if listing_key not in wanted:
                entry = cache.get(key)
                idle = settings.RMS_SUPPRESSED_IDLE_SECONDS
                if entry is not None and (now - entry[1]).total_seconds() < idle:
                    continue  # nobody watches it and it is recent enough to serve stale
            _compute(ns, key, salience_below, k)
            done += 1
    return done
