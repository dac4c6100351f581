"""The hourly rollup of the windowed metric sums (SPEC §10), so a cold overview reads a row per
hour instead of scanning a week of sessions and injections.

A beat task (``taskruns.tasks.window_rollup``) sums each finished UTC hour of every namespace
into :class:`WindowHour` — its sessions (count, with a correction, Σ budget) and injections
(count, ended unused, Σ token cost of the wasteful objects') — up to the hour that is running.
An hour holds exactly the rows whose id is at most the mark's; rows recorded later with an older
ts make their hour *dirty* and the next run recomputes it, so a rerun changes nothing.

"Wasted" counts the injections of objects that are wasteful *now* (usage ratio below
``WASTE_USAGE_RATIO``), so it cannot be summed per hour once and for all. The rollup keeps the
set it summed by (:class:`WasteMember`); each run folds the objects whose state changed since into
the hours (their injections' cost added or taken off) and updates the set, in one transaction.
An object's usage ratio moves only with its injections and used signals, so between runs the
objects that may have changed state are those with an injection or used signal beyond the mark:
a read compares only those with the set (``feedback.window_sums`` names the parts).

The same run counts every aggregate (:class:`AggregateMember`, one row per object as counted,
and :class:`AggregateBin`, their sums per namespace and usage bin: ``feedback.aggregate_sums``):
the overview's usage histogram and the all-time injection sums read those sums, minus the objects
that may have changed since (rows beyond the mark, or a DEPRECATED state other than the one
counted) as counted, plus the same objects as they are now. Likewise every object
(:class:`ObjectMember`, :class:`ObjectBin`: the overview's object count and confidence
histogram), corrected for the objects with an object-state operation at or beyond the store's
release bound read before the count (``objects_bound``).

Nothing here can give a number the live computation would not: rows beyond the mark are read
live ("late"), a retention pass that deletes rows the hours hold puts a *floor* under them (the
hours before it are computed live until the next run recomputes them), an aggregate rebuild does
the same for the whole namespace (and its aggregate sums), and without a mark everything is live.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from django.core.cache import cache
from django.db import transaction
from django.db.models import (
    Count,
    Exists,
    F,
    IntegerField,
    Max,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Floor, Least, Trunc

from feedback import aggregate_sums, window_sums
from feedback.aggregate_sums import CONFIDENCE_BINS, USAGE_BINS, BinSums, Member
from feedback.metrics import WASTE_USAGE_RATIO
from feedback.models import (
    AggregateBin,
    AggregateMember,
    FeedbackAggregate,
    InjectionEvent,
    ObjectBin,
    ObjectMember,
    SessionNamespace,
    SignalRecord,
    WasteMember,
    WindowHour,
    WindowRollupMark,
)
from feedback.window_sums import Sums, ceil_hour, floor_hour
from rms import store
from rms.models import MemoryObject, Namespace
from rms.policy import DEPRECATED, USED_SIGNALS

LOCK = "rms:window-rollup"
LOCK_SECONDS = 3600
#: Objects whose wasteful state changed since the last run are folded into the hours up to this
#: many; beyond it (the first run after a rebuild, say) the hours are recomputed from the rows.
FOLD_MAX = 20_000
#: Objects changed since the run beyond which a read of the aggregate sums scans the aggregates
#: instead (the correction costs ≈ 30 µs an object, the two scans ≈ 80 ms at 100k objects).
RECOUNT_MAX = 3000
#: Object-state operations beyond the run's release bound up to which a read of the object
#: counts corrects them (≈ 15 µs an object, plus the operations' read), and beyond which it
#: scans the objects instead (≈ 25 ms at 100k objects).
OBJECT_OPS_MAX = 1500
#: A floor that keeps a whole namespace live until the next run (``forget_namespaces``).
EVERYTHING = datetime(9999, 1, 1, tzinfo=UTC)
#: The mark of a first run still under way: no hour is rolled up.
NOTHING = datetime(1970, 1, 1, tzinfo=UTC)

_ZERO = Value(0, output_field=IntegerField())


# --- reading --------------------------------------------------------------------------------------


def _range(qs, lo, hi):
    if lo is not None:
        qs = qs.filter(ts__gte=lo)
    if hi is not None:
        qs = qs.filter(ts__lt=hi)
    return qs


def _wasteful_now(namespace_ids):
    """Whether a row's object is wasteful now, as the live form reads it (``injection_sums``):
    a probe of its aggregate by key, since the live parts are an hour or two of rows (the
    live form's hash of every wasteful object costs more than such a part)."""
    return Exists(
        FeedbackAggregate.objects.filter(
            object_id=OuterRef("object_id"),
            namespace_id__in=namespace_ids,
            usage_ratio__lt=WASTE_USAGE_RATIO,
        )
    )


def session_sum_fields() -> dict:
    """SPEC §10's sums of session scopes (a session counts in every namespace of its scope):
    count, with a correction, Σ budget. COUNT(*) and COUNT(namespace_id), not COUNT(id): the id
    is in no index, so counting it would read the table instead of the covering (namespace, ts)
    index. The live form (``feedback.selectors.session_sums``) and the rollup both use these."""
    return {
        "n": Count("*"),
        "corrected": Count("namespace", filter=Q(has_corrected=True)),
        "budget": Sum("context_budget"),
    }


def _injection_sum_fields(wasteful) -> dict:
    """SPEC §10's sums of injections: count, ended unused, Σ token cost where ``wasteful``."""
    return {
        "n": Count("*"),
        "unused": Count("namespace", filter=Q(ended_unused=True)),
        "wasted": Sum("token_cost", filter=Q(wasteful)),
    }


def _session_part(qs):
    f = session_sum_fields()
    return (
        qs.values("namespace_id")
        .annotate(s=f["n"], c=f["corrected"], b=f["budget"], i=_ZERO, u=_ZERO, w=_ZERO)
        .values_list("namespace_id", "s", "c", "b", "i", "u", "w")
        .order_by()
    )


def _injection_part(qs, wasteful):
    f = _injection_sum_fields(wasteful)
    return (
        qs.values("namespace_id")
        .annotate(s=_ZERO, c=_ZERO, b=_ZERO, i=f["n"], u=f["unused"], w=f["wasted"])
        .values_list("namespace_id", "s", "c", "b", "i", "u", "w")
        .order_by()
    )


def lifetime_injection_part(namespace_ids):
    """The injection sums of all time from the aggregates, which count every injection of
    their object (``total_injections``), those that ended unused (``unused_sessions``) and
    their token cost: 100k aggregate rows instead of millions of injections (and the lifetime
    values, which the retention pass leaves)."""
    return (
        FeedbackAggregate.objects.filter(namespace_id__in=namespace_ids)
        .values("namespace_id")
        .annotate(
            s=_ZERO,
            c=_ZERO,
            b=_ZERO,
            i=Sum("total_injections"),
            u=Sum("unused_sessions"),
            w=Sum("total_token_cost", filter=Q(usage_ratio__lt=WASTE_USAGE_RATIO)),
        )
        .values_list("namespace_id", "s", "c", "b", "i", "u", "w")
        .order_by()
    )


def usage_part(namespace_ids):
    """The live form of the usage histogram (SPEC §10, §8): the active aggregates with ≥ 1
    injection by (namespace, usage bin), with Σ usage ratio, count and review-queue count (the
    rules of ``feedback.aggregate_sums``, in SQL). The DEPRECATED exclusion is an ``IN
    (subquery)`` over the few deprecated ids rather than a join of every aggregate to its
    object."""
    return (
        FeedbackAggregate.objects.filter(namespace_id__in=namespace_ids, total_injections__gte=1)
        .exclude(object_id__in=Subquery(_deprecated_ids(namespace_ids)))
        .annotate(bin=Least(Floor(F("usage_ratio") * USAGE_BINS), Value(USAGE_BINS - 1.0)))
        .values("namespace_id", "bin")
        .annotate(
            total=Sum("usage_ratio"),
            n=Count("pk"),
            queue=Count(
                "pk",
                filter=Q(
                    usage_ratio__lt=aggregate_sums.REVIEW_USAGE_BELOW,
                    total_injections__gte=aggregate_sums.REVIEW_MIN_INJECTIONS,
                ),
            ),
        )
        .values_list("namespace_id", "bin", "total", "n", "queue")
        .order_by("namespace_id", "bin")
    )


def _deprecated_ids(namespace_ids):
    return MemoryObject.objects.filter(
        namespace_id__in=namespace_ids, epistemic_type=DEPRECATED
    ).values("pk")


def aggregate_sums_live(
    namespace_ids, *, usage: bool = True, lifetime: bool = True
) -> aggregate_sums.Sums:
    """The live forms (:func:`usage_part`, :func:`lifetime_injection_part`) as
    ``{namespace id: {bin: BinSums}}``: the usage bins (with ``usage``), and the injection
    sums in the UNCOUNTED bin (with ``lifetime``)."""
    out: aggregate_sums.Sums = {}
    if not namespace_ids:
        return out
    if usage:
        for ns_id, b, usage_sum, n, queue in usage_part(namespace_ids):
            bins = out.setdefault(ns_id, {})
            k = max(0, int(b))
            bins[k] = bins.get(k, BinSums()) + BinSums(usage_sum or 0.0, n, queue)
    if not lifetime:
        return out
    for ns_id, _, _, _, n, unused, wasted in lifetime_injection_part(namespace_ids):
        bins = out.setdefault(ns_id, {})
        sums = BinSums(injections=n or 0, unused=unused or 0, wasted=wasted or 0)
        bins[aggregate_sums.UNCOUNTED] = bins.get(aggregate_sums.UNCOUNTED, BinSums()) + sums
    return out


_MEMBER_FIELDS = (
    "namespace_id",
    "usage_ratio",
    "total_injections",
    "unused_sessions",
    "total_token_cost",
)


def _touched(namespace_ids, mark: WindowRollupMark) -> set:
    """The objects with an injection or a used signal beyond the mark: the only ones whose
    aggregate can differ from what the last run counted (an aggregate moves with its object's
    injections and signals, and of the signals only the used ones move a usage ratio)."""
    return {
        row[0]
        for row in InjectionEvent.objects.filter(
            namespace_id__in=namespace_ids, id__gt=mark.injection_id
        )
        .values_list("object_id")
        .union(
            SignalRecord.objects.filter(
                namespace_id__in=namespace_ids,
                id__gt=mark.signal_id,
                signal_type__in=USED_SIGNALS,
            ).values_list("object_id")
        )
    }


def _recounted(namespace_ids, touched: set) -> set:
    """``touched`` and the objects whose DEPRECATED state differs from the one counted (it moves
    without an injection or a signal): the deprecated objects now against those counted so,
    both small indexed sets."""
    now = _deprecated_ids(namespace_ids)
    newly = AggregateMember.objects.filter(
        namespace_id__in=namespace_ids, deprecated=False, object_id__in=now
    ).values_list("object_id")
    undone = (
        AggregateMember.objects.filter(namespace_id__in=namespace_ids, deprecated=True)
        .exclude(object_id__in=now)
        .values_list("object_id")
    )
    return touched | {row[0] for row in newly.union(undone)}


def _rolled(namespace_ids, mark: WindowRollupMark | None) -> list[int]:
    """The namespaces whose aggregate sums are read from the rollup: all but those made live
    since its run, once a run has counted the aggregates."""
    if mark is None or not mark.aggregates:
        return []
    live = set(mark.aggregates_live)
    return [n for n in namespace_ids if n not in live]


def _aggregate_read(
    namespace_ids,
    mark: WindowRollupMark | None,
    touched,
    *,
    usage: bool = True,
    lifetime: bool = True,
) -> aggregate_sums.Sums:
    """The aggregate sums (``feedback.aggregate_sums``) of these namespaces, inside the caller's
    snapshot: the rolled sums corrected for the objects that may have changed since the run
    (``touched()`` gives those with rows beyond the mark), or the live forms for a namespace the
    rollup does not cover (no run yet, or a namespace made live since the run: only the
    ``usage`` and ``lifetime`` parts asked for)."""
    rolled = _rolled(namespace_ids, mark)
    out = aggregate_sums_live(
        [n for n in namespace_ids if n not in rolled], usage=usage, lifetime=lifetime
    )
    if not rolled:
        return out
    stored: aggregate_sums.Sums = {}
    for ns_id, b, *values in AggregateBin.objects.filter(namespace_id__in=rolled).values_list(
        "namespace_id", "bin", "usage_sum", "counted", "queue", "injections", "unused", "wasted"
    ):
        stored.setdefault(ns_id, {})[b] = BinSums(*values)
    changed = sorted(_recounted(rolled, touched()))
    if len(changed) > RECOUNT_MAX:
        # Far behind the writes (beat stopped, say): the scans cost less than the correction.
        out.update(aggregate_sums_live(rolled, usage=usage, lifetime=lifetime))
        return out
    counted: list = []
    current: list = []
    if changed:
        # By key, in one round trip (rms.store: one array parameter per list on PostgreSQL, not
        # a placeholder per id). The rows of namespaces read live are dropped here.
        counted, aggs, deprecated = store.get().read(
            [
                store.Select(
                    AggregateMember,
                    where={"object_id": changed},
                    columns=(*_MEMBER_FIELDS, "deprecated"),
                ),
                store.Select(
                    FeedbackAggregate,
                    where={"object_id": changed},
                    columns=("object_id", *_MEMBER_FIELDS),
                ),
                store.Select(
                    MemoryObject,
                    where={"id": changed, "epistemic_type": DEPRECATED},
                    columns=("id",),
                ),
            ]
        )
        deprecated_now = {row[0] for row in deprecated}
        current = [(*row[1:], row[0] in deprecated_now) for row in aggs]
    keep = set(rolled)
    out.update(
        aggregate_sums.corrected(
            stored,
            [Member._make(r) for r in counted if r[0] in keep],
            [Member._make(r) for r in current if r[0] in keep],
        )
    )
    return out


def _once(fn):
    """``fn()`` computed at the first call and kept (the objects touched since the mark, which
    the window's waste correction and the aggregate sums share)."""
    kept = []

    def call():
        if not kept:
            kept.append(fn())
        return kept[0]

    return call


def aggregate_sums_by_namespace(
    namespace_ids: list[int], *, lifetime: bool = True
) -> aggregate_sums.Sums:
    """``{namespace id: {bin: BinSums}}``: the usage histogram and all-time injection sums of
    the aggregates (``feedback.aggregate_sums``), equal to :func:`aggregate_sums_live`'s, read
    from the rollup in one snapshot. Without ``lifetime`` a namespace read live skips the
    injection sums (the rolled ones come with the bins anyway)."""
    with store.get().snapshot():
        mark = WindowRollupMark.objects.first()
        return _aggregate_read(
            namespace_ids,
            mark,
            _once(lambda: _touched(namespace_ids, mark)),
            lifetime=lifetime,
        )


def object_counts_live(namespace_ids) -> aggregate_sums.ObjectCounts:
    """The live form of the object counts by (namespace, epistemic type, confidence bin)
    (``feedback.aggregate_sums.confidence_bin`` in SQL): a scan of the obj_ns_type covering
    index."""
    out: aggregate_sums.ObjectCounts = {}
    if not namespace_ids:
        return out
    rows = (
        MemoryObject.objects.filter(namespace_id__in=namespace_ids)
        .annotate(bin=Least(Floor(F("confidence") * CONFIDENCE_BINS), Value(CONFIDENCE_BINS - 1.0)))
        .values_list("namespace_id", "epistemic_type", "bin")
        .annotate(n=Count("*"))  # answered from the obj_ns_type covering index
        .order_by()
    )
    for ns_id, kind, b, n in rows:
        key = (ns_id, kind, max(0, int(b)))
        out[key] = out.get(key, 0) + n
    return out


def _object_key(namespace_id: int, epistemic_type: str, confidence: float):
    return (namespace_id, epistemic_type, aggregate_sums.confidence_bin(confidence))


def _object_read(namespace_ids, mark: WindowRollupMark | None) -> aggregate_sums.ObjectCounts:
    """The object counts of these namespaces, inside the caller's snapshot: the rolled counts
    corrected for the objects with an object-state operation at or beyond the run's release
    bound (every object changed or created since its count has one: ``rms.store``'s
    ``state_changes``, over the change feed's index), or the live form for a namespace the
    rollup does not cover (no run has counted the objects yet, or made live since the run)."""
    rolled = _rolled(namespace_ids, mark) if mark and mark.objects_bound is not None else []
    out = object_counts_live([n for n in namespace_ids if n not in rolled])
    if not rolled:
        return out
    names = list(Namespace.objects.filter(pk__in=rolled).values_list("name", flat=True))
    found = store.get().state_changes(mark.objects_bound, names, limit=OBJECT_OPS_MAX)
    changed = sorted({obj for _, obj in found})
    if len(found) >= OBJECT_OPS_MAX:
        # Far behind the writes (beat stopped, say): the scan costs less than the correction.
        out.update(object_counts_live(rolled))
        return out
    selects = [
        store.Select(
            ObjectBin,
            where={"namespace_id": rolled},
            columns=("namespace_id", "epistemic_type", "bin", "counted"),
        )
    ]
    if changed:
        # By key, in the same round trip (one array parameter per list on PostgreSQL).
        selects += [
            store.Select(
                ObjectMember,
                where={"object_id": changed},
                columns=("namespace_id", "epistemic_type", "bin"),
            ),
            store.Select(
                MemoryObject,
                where={"id": changed},
                columns=("namespace_id", "epistemic_type", "confidence"),
            ),
        ]
    bins, counted, current = [*store.get().read(selects), [], []][:3]
    keep = set(rolled)
    out.update(
        aggregate_sums.objects_corrected(
            {(ns_id, kind, b): n for ns_id, kind, b, n in bins},
            [tuple(r) for r in counted if r[0] in keep],
            [_object_key(*r) for r in current if r[0] in keep],
        )
    )
    return out


def object_sums_by_namespace(
    namespace_ids: list[int],
) -> tuple[aggregate_sums.Sums, aggregate_sums.ObjectCounts]:
    """What the overview's object statistics read, in one snapshot (one mark): the aggregate
    sums of :func:`aggregate_sums_by_namespace` without the injection sums of a namespace read
    live, and the object counts by (namespace, epistemic type, confidence bin), equal to
    :func:`object_counts_live`'s."""
    with store.get().snapshot():
        mark = WindowRollupMark.objects.first()
        sums = _aggregate_read(
            namespace_ids,
            mark,
            _once(lambda: _touched(namespace_ids, mark)),
            lifetime=False,
        )
        return sums, _object_read(namespace_ids, mark)


def _parts(
    namespace_ids, p: window_sums.Plan, mark: WindowRollupMark | None, touched, lifetime: bool
) -> list:
    """The grouped querysets whose rows add up to the window of ``p`` (module docstring);
    ``touched()``: the objects with rows beyond the mark (:func:`_touched`). With
    ``lifetime``, the sessions only (the injections come from the aggregates)."""
    ids = list(namespace_ids)
    wasteful = _wasteful_now(ids)
    scopes = SessionNamespace.objects.filter(namespace_id__in=ids)
    injections = InjectionEvent.objects.filter(namespace_id__in=ids)
    parts = []
    for lo, hi in p.live:
        parts.append(_session_part(_range(scopes, lo, hi)))
        if not lifetime:
            parts.append(_injection_part(_range(injections, lo, hi), wasteful))
    if p.rolled is None:
        return parts
    assert mark is not None
    lo, hi = p.rolled
    hours = WindowHour.objects.filter(namespace_id__in=ids, hour__lt=hi)
    if lo is not None:
        hours = hours.filter(hour__gte=lo)
    parts.append(
        hours.values("namespace_id")
        .annotate(
            s=Sum("sessions"),
            c=Sum("corrected"),
            b=Sum("budget"),
            i=_ZERO if lifetime else Sum("injections"),
            u=_ZERO if lifetime else Sum("unused"),
            w=_ZERO if lifetime else Sum("wasted"),
        )
        .values_list("namespace_id", "s", "c", "b", "i", "u", "w")
        .order_by()
    )
    # Rows of the rolled hours that the hours do not hold yet (recorded after the run).
    parts.append(_session_part(_range(scopes.filter(id__gt=mark.scope_id), lo, hi)))
    if lifetime:
        return parts
    late = injections.filter(id__gt=mark.injection_id)
    parts.append(_injection_part(_range(late, lo, hi), wasteful))
    # The objects whose wasteful state may differ from the set the hours were summed by: those
    # with an injection or a used signal beyond the mark. Their held injections' cost is added
    # (wasteful now, not in the set) or taken off (in the set, not wasteful now). Read first
    # (a few hundred ids between runs), so the probe of their injections is by object.
    objects = touched()
    if not objects:
        return parts
    member = Exists(WasteMember.objects.filter(object_id=OuterRef("object_id")))
    held = _range(injections.filter(id__lte=mark.injection_id), lo, hi).filter(
        object_id__in=sorted(objects)
    )
    parts.append(
        held.annotate(now_w=wasteful, was_w=member)
        .values("namespace_id")
        .annotate(
            s=_ZERO,
            c=_ZERO,
            b=_ZERO,
            i=_ZERO,
            u=_ZERO,
            w=Coalesce(Sum("token_cost", filter=Q(now_w=True, was_w=False)), 0)
            - Coalesce(Sum("token_cost", filter=Q(now_w=False, was_w=True)), 0),
        )
        .values_list("namespace_id", "s", "c", "b", "i", "u", "w")
        .order_by()
    )
    return parts


def _floor(mark: WindowRollupMark | None, ns_id: int) -> datetime | None:
    if mark is None:
        return None
    text = mark.floors.get(str(ns_id))
    return None if text is None else datetime.fromisoformat(text)


def window_sums_by_namespace(
    namespace_ids: list[int],
    since: datetime | None = None,
    until: datetime | None = None,
    *,
    lifetime: bool = False,
) -> dict[int, Sums]:
    """``{namespace id: Sums}`` of the window [since, until]: the same numbers as
    ``feedback.selectors.session_sums`` and ``injection_sums``' windowed form, with the whole
    hours read from the rollup. In one snapshot: the mark, the objects touched since it, then
    one statement per distinct plan (one in practice: the namespaces share the mark unless a
    floor sets one apart). ``lifetime`` (for the unbounded window): the injection sums of the
    aggregates (:func:`lifetime_injection_part`), read from the rollup (:func:`_aggregate_read`,
    which shares the objects touched since the mark)."""
    rows = []
    # One snapshot: the mark, the hours and the rows beyond it as of one moment (a run that
    # commits meanwhile would otherwise have its rows counted twice or not at all).
    with store.get().snapshot():
        mark = WindowRollupMark.objects.first()
        touched = _once(lambda: _touched(namespace_ids, mark))
        # All time: the injection sums of the aggregates, from the rollup where it covers the
        # namespace, else the live form as one more part of the statement below.
        extra = []
        if lifetime:
            rolled = _rolled(namespace_ids, mark)
            for ns_id, bins in _aggregate_read(rolled, mark, touched).items():
                part = aggregate_sums.lifetime(bins)
                rows.append((ns_id, 0, 0, 0, part.injections, part.unused, part.wasted))
            live = [n for n in namespace_ids if n not in rolled]
            extra = [lifetime_injection_part(live)] if live else []
        through = None if mark is None or mark.through == NOTHING else mark.through
        groups: dict[window_sums.Plan, list[int]] = defaultdict(list)
        for ns_id in namespace_ids:
            groups[window_sums.plan(since, until, through, _floor(mark, ns_id))].append(ns_id)
        for p, ids in groups.items():
            parts = extra + _parts(ids, p, mark, touched, lifetime)
            extra = []
            for part in store.get().grouped_sums(parts):
                rows.extend(part)
    return window_sums.merge((r[0], Sums(*(int(v or 0) for v in r[1:]))) for r in rows)


# --- the rollup -----------------------------------------------------------------------------------


def _hour_sums(namespace_ids, lo, hi, injection_id: int, scope_id: int) -> dict:
    """``{(namespace id, hour): Sums}`` of the rows in [lo, hi) with ids up to the mark's, the
    waste by :class:`WasteMember` as it is committed."""
    hour = Trunc("ts", "hour", tzinfo=UTC)
    scopes = _range(SessionNamespace.objects.filter(id__lte=scope_id), lo, hi)
    injections = _range(InjectionEvent.objects.filter(id__lte=injection_id), lo, hi)
    if namespace_ids is not None:
        scopes = scopes.filter(namespace_id__in=namespace_ids)
        injections = injections.filter(namespace_id__in=namespace_ids)
    out: dict = defaultdict(Sums)
    for ns_id, h, n, corrected, budget in (
        scopes.annotate(h=hour)
        .values_list("namespace_id", "h")
        .annotate(**session_sum_fields())
        .order_by()
    ):
        out[(ns_id, h)] += Sums(sessions=n, corrected=corrected, budget=budget or 0)
    members = WasteMember.objects.values("object_id")
    for ns_id, h, n, unused, wasted in (
        injections.annotate(h=hour)
        .values_list("namespace_id", "h")
        .annotate(**_injection_sum_fields(Q(object_id__in=members)))
        .order_by()
    ):
        out[(ns_id, h)] += Sums(injections=n, unused=unused, wasted=wasted or 0)
    return out


def _write_hours(sums: dict, ranges: list[tuple]) -> int:
    """Replace the hour rows of each (namespace ids or None for all, lo, hi) range by ``sums``
    (inside the caller's transaction)."""
    for ids, lo, hi in ranges:
        qs = WindowHour.objects.filter(hour__lt=hi)
        if lo is not None:
            qs = qs.filter(hour__gte=lo)
        if ids is not None:
            qs = qs.filter(namespace_id__in=ids)
        qs.delete()
    WindowHour.objects.bulk_create(
        [
            WindowHour(
                namespace_id=ns_id,
                hour=h,
                sessions=s.sessions,
                corrected=s.corrected,
                budget=s.budget,
                injections=s.injections,
                unused=s.unused,
                wasted=s.wasted,
            )
            for (ns_id, h), s in sorted(sums.items(), key=lambda kv: (kv[0][0], kv[0][1]))
        ],
        batch_size=2000,
    )
    return len(sums)


def _waste_changes() -> tuple[dict, list]:
    """Objects wasteful now and not in the set (``{object id: namespace id}``) and in the set
    and not wasteful now (ids): a full comparison, for the beat task only."""
    wasteful = FeedbackAggregate.objects.filter(usage_ratio__lt=WASTE_USAGE_RATIO)
    added = dict(
        wasteful.exclude(object_id__in=WasteMember.objects.values("object_id")).values_list(
            "object_id", "namespace_id"
        )
    )
    removed = list(
        WasteMember.objects.exclude(object_id__in=wasteful.values("object_id")).values_list(
            "object_id", flat=True
        )
    )
    return added, removed


def _fold(added: dict, removed: list, through: datetime, injection_id: int) -> None:
    """Add the held injections' cost of the newly wasteful objects to their hours and take that
    of the objects no longer wasteful off (inside the caller's transaction)."""
    delta: dict = defaultdict(int)
    hour = Trunc("ts", "hour", tzinfo=UTC)
    for ids, sign in ((list(added), 1), (removed, -1)):
        for start in range(0, len(ids), 1000):
            rows = (
                InjectionEvent.objects.filter(
                    object_id__in=ids[start : start + 1000],
                    id__lte=injection_id,
                    ts__lt=through,
                )
                .annotate(h=hour)
                .values_list("namespace_id", "h")
                .annotate(t=Sum("token_cost"))
                .order_by()
            )
            for ns_id, h, tokens in rows:
                delta[(ns_id, h)] += sign * tokens
    for (ns_id, h), d in delta.items():
        if d:
            WindowHour.objects.filter(namespace_id=ns_id, hour=h).update(wasted=F("wasted") + d)


def _dirty_hours(mark: WindowRollupMark) -> set[datetime]:
    """Rolled-up hours with a session or an injection the last run did not see."""
    hour = Trunc("ts", "hour", tzinfo=UTC)
    found: set[datetime] = set()
    for model, last in ((SessionNamespace, mark.scope_id), (InjectionEvent, mark.injection_id)):
        found |= set(
            model.objects.filter(id__gt=last, ts__lt=mark.through)
            .annotate(h=hour)
            .values_list("h", flat=True)
            .distinct()
            .order_by()
        )
    return found


def _count_members() -> dict:
    """``{object id: Member}`` of every aggregate as it is now: what this run counts (beat
    only; read after the writers holding lower ids have ended, so every aggregate change of a
    row up to the mark's ids is in it). The DEPRECATED ids are read apart: a read compares the
    flags counted here with the objects' state then, so they need not be of one moment with the
    aggregates."""
    deprecated = set(
        MemoryObject.objects.filter(epistemic_type=DEPRECATED).values_list("pk", flat=True)
    )
    return {
        row[0]: Member(*row[1:], row[0] in deprecated)
        for row in FeedbackAggregate.objects.values_list("object_id", *_MEMBER_FIELDS)
        .order_by()
        .iterator(chunk_size=10_000)
    }


def _members_to_write(members: dict) -> tuple[list, list]:
    """The member rows that differ from ``members`` (to be replaced) and those whose aggregate
    is gone: only those are written, not every object each run."""
    stored = {
        row[0]: Member(*row[1:])
        for row in AggregateMember.objects.values_list("object_id", *_MEMBER_FIELDS, "deprecated")
        .order_by()
        .iterator(chunk_size=10_000)
    }
    changed = [o for o, m in members.items() if stored.get(o) != m]
    gone = [o for o in stored if o not in members]
    return changed, gone


def _write_members(members: dict, changed: list, gone: list) -> None:
    """Replace the changed member rows and every bin's sums (inside the caller's transaction)."""
    drop = changed + gone
    for start in range(0, len(drop), 1000):
        AggregateMember.objects.filter(object_id__in=drop[start : start + 1000]).delete()
    AggregateMember.objects.bulk_create(
        [
            AggregateMember(
                object_id=o,
                namespace_id=members[o].namespace_id,
                usage_ratio=members[o].usage_ratio,
                total_injections=members[o].total_injections,
                unused_sessions=members[o].unused_sessions,
                total_token_cost=members[o].total_token_cost,
                deprecated=members[o].deprecated,
            )
            for o in changed
        ],
        batch_size=2000,
    )
    AggregateBin.objects.all().delete()
    AggregateBin.objects.bulk_create(
        [
            AggregateBin(
                namespace_id=ns_id,
                bin=b,
                usage_sum=v.usage_sum,
                counted=v.objects,
                queue=v.queue,
                injections=v.injections,
                unused=v.unused,
                wasted=v.wasted,
            )
            for ns_id, bins in sorted(aggregate_sums.total(members.values()).items())
            for b, v in sorted(bins.items())
        ]
    )


def _count_objects() -> dict:
    """``{object id: (namespace id, epistemic type, confidence bin)}`` of every object as it is
    now (beat only; the release bound is read before it)."""
    return {
        row[0]: _object_key(*row[1:])
        for row in MemoryObject.objects.values_list(
            "pk", "namespace_id", "epistemic_type", "confidence"
        )
        .order_by()
        .iterator(chunk_size=10_000)
    }


def _write_objects(keys: dict) -> None:
    """Replace the object member rows that differ from ``keys`` (and those of objects gone) and
    every object bin (inside the caller's transaction)."""
    stored = {
        row[0]: tuple(row[1:])
        for row in ObjectMember.objects.values_list(
            "object_id", "namespace_id", "epistemic_type", "bin"
        )
        .order_by()
        .iterator(chunk_size=10_000)
    }
    changed = [o for o, k in keys.items() if stored.get(o) != k]
    drop = changed + [o for o in stored if o not in keys]
    for start in range(0, len(drop), 1000):
        ObjectMember.objects.filter(object_id__in=drop[start : start + 1000]).delete()
    ObjectMember.objects.bulk_create(
        [
            ObjectMember(object_id=o, namespace_id=ns_id, epistemic_type=kind, bin=b)
            for o in changed
            for ns_id, kind, b in (keys[o],)
        ],
        batch_size=2000,
    )
    ObjectBin.objects.all().delete()
    ObjectBin.objects.bulk_create(
        [
            ObjectBin(namespace_id=ns_id, epistemic_type=kind, bin=b, counted=n)
            for (ns_id, kind, b), n in sorted(aggregate_sums.object_counts(keys.values()).items())
        ]
    )


def rollup(now: datetime) -> dict:
    """Bring the hourly rollup up to the hour running at ``now``: the waste set and the hours it
    changed, the dirty hours, the hours below a retention floor and the new hours. Two
    transactions (the waste set with its fold; the hours with the mark); the grouped reads of
    the hours run before the second. Returns the hour rows written."""
    target = floor_hour(now)
    mark = WindowRollupMark.objects.first()
    if mark is None:
        # Nothing rolled up yet (every read is live); a retention pass during this first run
        # finds the mark and leaves its floor for the next one.
        mark = WindowRollupMark.objects.create(through=NOTHING)
    first = mark.through == NOTHING
    # The ids are read first, and the writers that may still hold lower ones are waited for:
    # the hours then hold exactly the rows up to these ids.
    ids = {
        "injection_id": InjectionEvent.objects.aggregate(m=Max("id"))["m"] or 0,
        "scope_id": SessionNamespace.objects.aggregate(m=Max("id"))["m"] or 0,
        "signal_id": SignalRecord.objects.aggregate(m=Max("id"))["m"] or 0,
    }
    store.get().settle_writers()
    added, removed = _waste_changes()
    refold = not first and len(added) + len(removed) > FOLD_MAX
    with transaction.atomic():
        if refold:
            # The set changes without its fold: every namespace is read live until the hours
            # are recomputed with it (the floors go with the second transaction).
            locked = WindowRollupMark.objects.select_for_update().get(pk=mark.pk)
            everything = EVERYTHING.isoformat()
            floors = {**locked.floors, **{str(pk): everything for pk in _namespace_ids()}}
            WindowRollupMark.objects.filter(pk=mark.pk).update(floors=floors)
        elif not first:
            _fold(added, removed, mark.through, mark.injection_id)
        WasteMember.objects.filter(object_id__in=removed).delete()
        WasteMember.objects.bulk_create(
            [WasteMember(object_id=o, namespace_id=ns) for o, ns in added.items()],
            batch_size=2000,
        )
    seen = WindowRollupMark.objects.get(pk=mark.pk)
    floors_seen, live_seen = dict(seen.floors), set(seen.aggregates_live)
    if first or refold:
        ranges = [(None, None, target)]
    else:
        ranges = [(None, h, h + window_sums.HOUR) for h in sorted(_dirty_hours(mark))]
        ranges += [([int(ns)], None, datetime.fromisoformat(f)) for ns, f in floors_seen.items()]
        ranges.append((None, mark.through, target))
    ranges = [(n, lo, min(hi, target)) for n, lo, hi in ranges]
    ranges = [(n, lo, hi) for n, lo, hi in ranges if lo is None or lo < hi]
    sums: dict = {}
    for ns_ids, lo, hi in ranges:
        sums.update(_hour_sums(ns_ids, lo, hi, ids["injection_id"], ids["scope_id"]))
    # Every aggregate counted again (a full count: a namespace made live since the last run is
    # covered again, and the float sums do not drift); only the changed member rows written.
    members = _count_members()
    changed, gone = _members_to_write(members)
    # The objects likewise, after the release bound: every object change the count misses
    # has an object-state operation at or beyond it (its transaction had not ended).
    bound = store.get().release_bound()
    objects = _count_objects()
    with transaction.atomic():
        current = WindowRollupMark.objects.select_for_update().get(pk=mark.pk)
        written = _write_hours(sums, ranges)
        _write_members(members, changed, gone)
        _write_objects(objects)
        # A floor the retention pass moved while this ran stays for the next run, and so does a
        # namespace made live after the aggregates were counted.
        floors = {ns: f for ns, f in current.floors.items() if floors_seen.get(ns) != f}
        live = sorted(set(current.aggregates_live) - live_seen)
        WindowRollupMark.objects.filter(pk=mark.pk).update(
            through=max(target, current.through),
            floors=floors,
            aggregates=True,
            aggregates_live=live,
            objects_bound=bound,
            **ids,
        )
    return written


def _namespace_ids() -> list[int]:
    return list(Namespace.objects.values_list("pk", flat=True))


def rollup_all(now: datetime) -> dict:
    """The beat task: one run at a time (a cache lock)."""
    if not cache.add(LOCK, 1, LOCK_SECONDS):
        return {"skipped": 1}
    try:
        return {"rows": rollup(now)}
    finally:
        cache.delete(LOCK)


# --- what makes hours stale -----------------------------------------------------------------------


def forget(before: dict[int, datetime]) -> None:
    """Rows of namespace ``n`` before ``before[n]`` were deleted (or changed in a way the ids do
    not show): its hours before that are read live until the next run recomputes them. Call it
    in the transaction that deletes them."""
    if not before:
        return
    mark = WindowRollupMark.objects.select_for_update().first()
    if mark is None:
        return
    floors = dict(mark.floors)
    for ns_id, ts in before.items():
        hour = ceil_hour(ts)
        old = floors.get(str(ns_id))
        if old is None or datetime.fromisoformat(old) < hour:
            floors[str(ns_id)] = hour.isoformat()
    WindowRollupMark.objects.filter(pk=mark.pk).update(floors=floors)


def forget_sessions(session_ids) -> None:
    """``forget`` for the sessions about to be deleted (the retention pass). A deleted
    injection or used signal beyond the mark would take its object out of the ones a read finds
    changed since the run (its aggregate keeps the change): its namespace is read live, hours and
    aggregates, until the next run."""
    rows = (
        SessionNamespace.objects.filter(session_id__in=session_ids)
        .values_list("namespace_id")
        .annotate(last=Max("ts"))
        .order_by()
    )
    forget({ns_id: last + window_sums.TICK for ns_id, last in rows})
    mark = WindowRollupMark.objects.select_for_update().first()
    if mark is None:
        return
    moved = {
        row[0]
        for row in InjectionEvent.objects.filter(
            session_id__in=session_ids, id__gt=mark.injection_id
        )
        .values_list("namespace_id")
        .union(
            SignalRecord.objects.filter(
                feedback_session_id__in=session_ids,
                id__gt=mark.signal_id,
                signal_type__in=USED_SIGNALS,
            ).values_list("namespace_id")
        )
    }
    forget_namespaces(moved)
    forget_aggregates(moved)


def forget_namespaces(namespace_ids) -> None:
    """The waste of these namespaces' objects may have changed without an injection or a signal
    (an aggregate rebuild): they are read live until the next run."""
    forget(dict.fromkeys(namespace_ids, EVERYTHING - window_sums.HOUR))


def forget_aggregates(namespace_ids) -> None:
    """These namespaces' aggregates moved without an injection or a used signal beyond the mark
    (an aggregate rebuild; the retention pass deleting such rows): their aggregate sums are
    read live until the next run. Call it in the transaction that makes the change."""
    if not namespace_ids:
        return
    mark = WindowRollupMark.objects.select_for_update().first()
    if mark is None:
        return
    live = sorted(set(mark.aggregates_live) | set(namespace_ids))
    WindowRollupMark.objects.filter(pk=mark.pk).update(aggregates_live=live)


def forget_state_operations(before: datetime) -> None:
    """The retention pass is about to delete operations older than ``before``. An object-state
    operation at or beyond the last run's release bound among them would take its object out
    of those a read of the object counts finds changed (the object keeps the change): its
    namespace is read live until the next run (``forget_aggregates``). Those are operations
    written since the run with an old ``ts``, so normally none. Call it in the transaction that
    deletes them."""
    mark = WindowRollupMark.objects.select_for_update().first()
    if mark is None or mark.objects_bound is None:
        return
    names = {ns for ns, _ in store.get().state_changes(mark.objects_bound, before=before)}
    if names:
        forget_aggregates(
            list(Namespace.objects.filter(name__in=names).values_list("pk", flat=True))
        )
