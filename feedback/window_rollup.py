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

The same run counts every aggregate and every object for the overview's object statistics and
the all-time injection sums (``feedback.object_rollup``, read with the same mark).

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
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Trunc

from feedback import aggregate_sums, object_rollup, window_sums
from feedback.metrics import WASTE_USAGE_RATIO
from feedback.models import (
    FeedbackAggregate,
    InjectionEvent,
    SessionNamespace,
    SignalRecord,
    WasteMember,
    WindowHour,
    WindowRollupMark,
)
from feedback.window_sums import Sums, ceil_hour, floor_hour
from rms import store
from rms.models import Namespace
from rms.policy import USED_SIGNALS

LOCK = "rms:window-rollup"
LOCK_SECONDS = 3600
#: Objects whose wasteful state changed since the last run are folded into the hours up to this
#: many; beyond it (the first run after a rebuild, say) the hours are recomputed from the rows.
FOLD_MAX = 20_000
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


def _parts(
    namespace_ids, p: window_sums.Plan, mark: WindowRollupMark | None, touched, lifetime: bool
) -> list:
    """The grouped querysets whose rows add up to the window of ``p`` (module docstring);
    ``touched()``: the objects with rows beyond the mark (``object_rollup.touched``). With
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
    aggregates, read from the rollup (``feedback.object_rollup.aggregate_read``, which shares the
    objects touched since the mark)."""
    rows = []
    # One snapshot: the mark, the hours and the rows beyond it as of one moment (a run that
    # commits meanwhile would otherwise have its rows counted twice or not at all).
    with store.get().snapshot():
        mark = WindowRollupMark.objects.first()
        touched = object_rollup.once(lambda: object_rollup.touched(namespace_ids, mark))
        # All time: the injection sums of the aggregates, from the rollup where it covers the
        # namespace, else the live form as one more part of the statement below.
        extra = []
        if lifetime:
            rolled = object_rollup.rolled_namespaces(namespace_ids, mark)
            for ns_id, bins in object_rollup.aggregate_read(rolled, mark, touched).items():
                part = aggregate_sums.lifetime(bins)
                rows.append((ns_id, 0, 0, 0, part.injections, part.unused, part.wasted))
            live = [n for n in namespace_ids if n not in rolled]
            extra = [object_rollup.lifetime_injection_part(live)] if live else []
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
    members = object_rollup.count_members()
    changed, gone = object_rollup.members_to_write(members)
    # The objects likewise, after the release bound: every object change the count misses
    # has an object-state operation at or beyond it (its transaction had not ended).
    bound = store.get().release_bound()
    objects = object_rollup.count_objects()
    with transaction.atomic():
        current = WindowRollupMark.objects.select_for_update().get(pk=mark.pk)
        written = _write_hours(sums, ranges)
        object_rollup.write_members(members, changed, gone)
        object_rollup.write_objects(objects)
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
    object_rollup.forget_aggregates(moved)


def forget_namespaces(namespace_ids) -> None:
    """The waste of these namespaces' objects may have changed without an injection or a signal
    (an aggregate rebuild): they are read live until the next run."""
    forget(dict.fromkeys(namespace_ids, EVERYTHING - window_sums.HOUR))
