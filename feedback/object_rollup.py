"""The window rollup's object statistics: the aggregate sums (the usage histogram with its
Σ usage ratio and review-queue count, and the all-time injection sums) and the object counts
(the object count and the confidence histogram) that the overview, the metrics and the "all"
window read.

Each run of the window rollup (``feedback.window_rollup.rollup``) counts every aggregate
(:class:`AggregateMember`, one row per object as counted, and :class:`AggregateBin`, their sums
per namespace and usage bin: ``feedback.aggregate_sums``) and every object (:class:`ObjectMember`,
:class:`ObjectBin`). A read is the stored sums, minus the objects that may have changed since the
run as they were counted, plus the same objects as they are now: for the aggregates, those with
an injection or a used signal beyond the mark, or a DEPRECATED state other than the one counted;
for the objects, those with an object-state operation at or beyond the store's release bound read
before the count (``objects_bound``). A namespace made live since the run (an aggregate rebuild,
a retention pass deleting rows beyond the mark) and one no run has counted are read live: the
live forms here are the reference the tests pin the reads to.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, F, IntegerField, Q, Subquery, Sum, Value
from django.db.models.functions import Floor, Least

from feedback import aggregate_sums
from feedback.aggregate_sums import CONFIDENCE_BINS, USAGE_BINS, BinSums, Member
from feedback.metrics import WASTE_USAGE_RATIO
from feedback.models import (
    AggregateBin,
    AggregateMember,
    FeedbackAggregate,
    InjectionEvent,
    ObjectBin,
    ObjectMember,
    SignalRecord,
    WindowRollupMark,
)
from rms import store
from rms.models import MemoryObject, Namespace
from rms.policy import DEPRECATED, USED_SIGNALS

#: Objects changed since the run beyond which a read of the aggregate sums scans the aggregates
#: instead (the correction costs ≈ 30 µs an object, the two scans ≈ 80 ms at 100k objects).
RECOUNT_MAX = 3000
#: Object-state operations beyond the run's release bound up to which a read of the object
#: counts corrects them (≈ 15 µs an object, plus the operations' read), and beyond which it
#: scans the objects instead (≈ 25 ms at 100k objects).
OBJECT_OPS_MAX = 1500
_ZERO = Value(0, output_field=IntegerField())


# --- reading --------------------------------------------------------------------------------------


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


def touched(namespace_ids, mark: WindowRollupMark) -> set:
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


def rolled_namespaces(namespace_ids, mark: WindowRollupMark | None) -> list[int]:
    """The namespaces whose aggregate sums are read from the rollup: all but those made live
    since its run, once a run has counted the aggregates."""
    if mark is None or not mark.aggregates:
        return []
    live = set(mark.aggregates_live)
    return [n for n in namespace_ids if n not in live]


def aggregate_read(
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
    rolled = rolled_namespaces(namespace_ids, mark)
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


def once(fn):
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
        return aggregate_read(
            namespace_ids,
            mark,
            once(lambda: touched(namespace_ids, mark)),
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
    rolled = (
        rolled_namespaces(namespace_ids, mark) if mark and mark.objects_bound is not None else []
    )
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
        sums = aggregate_read(
            namespace_ids,
            mark,
            once(lambda: touched(namespace_ids, mark)),
            lifetime=False,
        )
        return sums, _object_read(namespace_ids, mark)


# --- counting (each run) --------------------------------------------------------------------------


def count_members() -> dict:
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


def members_to_write(members: dict) -> tuple[list, list]:
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


def write_members(members: dict, changed: list, gone: list) -> None:
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


def count_objects() -> dict:
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


def write_objects(keys: dict) -> None:
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


# --- what makes the sums live ---------------------------------------------------------------------


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
