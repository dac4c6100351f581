"""The rollup of retrieval quality: the sums of each finished UTC day, and of each finished hour
of the day still running, so the dashboard's trends read a row per day (and per hour of today)
and API client instead of scanning the injections.

A beat task (``feedback.tasks.retrieval_rollup``) rolls a namespace up to the hour running: the
days before that hour's midnight into :class:`RetrievalDay`, the hours since into
:class:`RetrievalHour`. A unit holds exactly the injections and used signals whose ids are at
most the mark's (they are computed with those bounds), so a rerun changes nothing. What a read
computes live is the part of its window after the mark (the hour running and what arrived
since the last run) and its partial first day or hour.

Nothing here can give a number the live form (``feedback.selectors.retrieval_rows_daily``)
would not, at any moment:

- a unit with an injection or a used signal beyond the mark (a session recorded late with an
  old ts, a signal after its session's unit was rolled up) is *late*: a read computes it live,
  and the next run recomputes it;
- the retention pass, in its delete transaction, puts a *floor* under the namespace
  (:func:`forget_sessions`): the units before it are read live until the next run recomputes
  them;
- a namespace without a finished first run is read live.

The evaluation stays ``feedback.retrieval_quality``: the rows are the ``DayRows`` that
``merge_days`` adds up (each session lies in one hour, so hours add up like days), and a unit
read from the rollup evaluates to the same numbers as the live computation of that unit.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta

from django.core.cache import cache
from django.db import transaction
from django.db.models import Max, Q
from django.db.models.functions import Trunc

from feedback import retrieval_quality, utility
from feedback.models import (
    InjectionEvent,
    RetrievalDay,
    RetrievalHour,
    RetrievalRollupMark,
    SessionNamespace,
    SignalRecord,
)
from feedback.retrieval_quality import DayRows, RankRow
from feedback.selectors import retrieval_rows_daily, retrieval_rows_in
from rms import store
from rms.models import Namespace

LOCK = "rms:retrieval-rollup"
LOCK_SECONDS = 3600
#: The mark of a first run still under way: nothing is rolled up, every read is live.
NOTHING = datetime(1970, 1, 1, tzinfo=UTC)

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
#: The selectors' windows include their end; the parts here are half-open, [lo, hi).
TICK = timedelta(microseconds=1)

Range = tuple[datetime | None, datetime]


# --- units ----------------------------------------------------------------------------------------


def midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def floor_day(ts: datetime) -> datetime:
    return midnight(ts.astimezone(UTC).date())


def floor_hour(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _ceil(ts: datetime, start: datetime, unit: timedelta) -> datetime:
    return start if start == ts else start + unit


def align(ts: datetime, cut: datetime) -> datetime:
    """The first unit boundary at or after ``ts`` when days are the unit before ``cut`` (a
    midnight) and hours from it."""
    if ts >= cut:
        return _ceil(ts, floor_hour(ts), HOUR)
    return _ceil(ts, floor_day(ts), DAY)


def unit_of(hour: datetime, cut: datetime) -> Range:
    """The unit holding ``hour``: itself from ``cut`` on, its day before."""
    if hour >= cut:
        return hour, hour + HOUR
    start = floor_day(hour)
    return start, start + DAY


def rolled_range(
    since: datetime | None, until: datetime | None, through: datetime, floor: datetime | None
) -> Range | None:
    """The whole units of the window [since, until] (both included, None: open) that a rollup
    reaching ``through`` holds and may be read (not before ``floor``), or None: [lo, hi), lo None
    from the first one."""
    cut = floor_day(through)
    end = None if until is None else until + TICK
    lo = None if since is None else align(since, cut)
    if floor is not None:
        lo = align(floor, cut) if lo is None else max(lo, align(floor, cut))
    if end is None or end >= through:
        hi = through
    elif end >= cut:
        hi = floor_hour(end)
    else:
        hi = floor_day(end)
    if lo is not None and lo >= hi:
        return None
    return lo, hi


def _key(rank: int | None) -> str:
    return "" if rank is None else str(rank)


def _rank(key: str) -> int | None:
    return int(key) if key else None


def encode(rows: DayRows) -> tuple[dict, dict]:
    """The JSON of a unit's rows: ``ranks`` and ``hits`` of :class:`RetrievalDay`."""
    ranks = {
        _key(r.rank): [r.injections, r.used, r.token_cost, r.used_token_cost] for r in rows.ranks
    }
    return ranks, {_key(rank): n for rank, n in rows.hits.items()}


def decode(row: RetrievalDay | RetrievalHour) -> DayRows:
    ranks = [RankRow(_rank(key), *values) for key, values in row.ranks.items()]
    return DayRows(ranks, row.sessions, Counter({_rank(k): n for k, n in row.hits.items()}))


def _late_hours(namespace, mark: RetrievalRollupMark, lo: datetime | None, hi: datetime) -> set:
    """The hours in [lo, hi) with an injection or a used signal beyond the mark (a signal
    carries its session's ts): a few hundred rows between runs, read by id."""
    hour = Trunc("ts", "hour", tzinfo=UTC)
    injections = InjectionEvent.objects.filter(
        namespace=namespace, id__gt=mark.injection_id, ts__lt=hi
    )
    signals = SignalRecord.objects.filter(
        namespace=namespace,
        id__gt=mark.signal_id,
        signal_type__in=utility.USED_SIGNALS,
        ts__lt=hi,
    )
    if lo is not None:
        injections, signals = injections.filter(ts__gte=lo), signals.filter(ts__gte=lo)
    found = (
        injections.annotate(h=hour)
        .values_list("h")
        .order_by()
        .union(signals.annotate(h=hour).values_list("h").order_by())
    )
    return {h for (h,) in found}


def _ranges_q(field: str, ranges: list[Range], as_day: bool = False) -> Q:
    parts = []
    for lo, hi in ranges:
        part = Q(**{f"{field}__lt": hi.date() if as_day else hi})
        if lo is not None:
            part &= Q(**{f"{field}__gte": lo.date() if as_day else lo})
        parts.append(part)
    return functools.reduce(operator.or_, parts) if parts else Q(pk__in=[])


# --- reading --------------------------------------------------------------------------------------


def retrieval_days(
    namespace,
    since: datetime | None = None,
    until: datetime | None = None,
    actor_id: str | None = None,
) -> dict[date, DayRows]:
    """``feedback.selectors.retrieval_rows_daily`` with the whole units of the window that are
    rolled up read from the rollup and the rest computed live (a partial first unit, what lies
    after the mark, the late units, the units below a floor): the same rows, in one snapshot (a
    run committing meanwhile would otherwise have its rows counted twice or not at all).
    ``since`` None is from the first injection, ``until`` None up to the last: the dashboard's
    trends and the API's ``/retrieval-quality`` (:func:`retrieval_window`) both read this."""
    with store.get().snapshot():
        mark = RetrievalRollupMark.objects.filter(namespace=namespace).first()
        rolled = None
        if mark is not None and mark.through != NOTHING:
            rolled = rolled_range(since, until, mark.through, mark.floor)
        if rolled is None:
            return retrieval_rows_daily(namespace, since, until, actor_id)
        return _read(namespace, since, until, actor_id, mark, *rolled)


def _read(namespace, since, until, actor_id, mark, lo, hi) -> dict[date, DayRows]:
    cut = floor_day(mark.through)
    late = sorted({unit_of(h, cut) for h in _late_hours(namespace, mark, lo, hi)})
    live: list[tuple] = list(late)
    if lo is not None and (since is None or since < lo):
        live.append((since, lo))
    end = None if until is None else until + TICK
    if end is None or hi < end:
        live.append((hi, end))
    parts: dict[date, list[DayRows]] = {}
    if lo is None or lo < cut:
        days = RetrievalDay.objects.filter(namespace=namespace, day__lt=min(hi, cut).date())
        if lo is not None:
            days = days.filter(day__gte=lo.date())
        days = days.exclude(day__in=[start.date() for start, _ in late if start < cut])
        if actor_id is not None:
            days = days.filter(client__name=actor_id)
        for row in days.order_by("day", "client_id"):
            parts.setdefault(row.day, []).append(decode(row))
    if hi > cut:
        hours = RetrievalHour.objects.filter(
            namespace=namespace, hour__gte=cut if lo is None else max(lo, cut), hour__lt=hi
        ).exclude(hour__in=[start for start, _ in late if start >= cut])
        if actor_id is not None:
            hours = hours.filter(client__name=actor_id)
        for row in hours.order_by("hour", "client_id"):
            parts.setdefault(row.hour.astimezone(UTC).date(), []).append(decode(row))
    for (day,), rows in retrieval_rows_in(namespace, live, actor_id).items():
        parts.setdefault(day, []).append(rows)
    return {day: retrieval_quality.merge_days(rows) for day, rows in sorted(parts.items())}


def retrieval_window(
    namespace,
    since: datetime | None = None,
    until: datetime | None = None,
    actor_id: str | None = None,
) -> DayRows:
    """The rows of the whole window (``retrieval_quality.evaluate_counts``' arguments): its
    days from :func:`retrieval_days`, added up. Each session lies in one day, so this equals
    the one-window live form (``feedback.selectors.retrieval_rows``) to the bit."""
    return retrieval_quality.merge_days(retrieval_days(namespace, since, until, actor_id).values())


# --- the rollup -----------------------------------------------------------------------------------


def _split(ranges: list[Range], cut: datetime) -> tuple[list[Range], list[Range]]:
    """The day part (before ``cut``) and the hour part of each range."""
    days, hours = [], []
    for lo, hi in ranges:
        if lo is None or lo < cut:
            days.append((lo, min(hi, cut)))
        if hi > cut:
            hours.append((cut if lo is None else max(lo, cut), hi))
    return days, hours


def rollup_namespace(namespace, target: datetime, ids: tuple[int, int]) -> int:
    """Bring ``namespace``'s rollup up to the hour ``target`` with the rows up to ``ids``
    (injection id, signal id): recompute its late units, the units below a floor, and the new
    ones (a day once it is over, from its rows); then replace their rows and move the mark, in
    one transaction (the grouped reads run before it). Returns the rows written."""
    mark = RetrievalRollupMark.objects.get(namespace=namespace)
    target = max(target, mark.through)
    cut = floor_day(target)
    floor_seen = mark.floor
    if mark.through == NOTHING:
        ranges: list[Range] = [(None, target)]
    else:
        ranges = sorted({unit_of(h, cut) for h in _late_hours(namespace, mark, None, mark.through)})
        if floor_seen is not None:
            ranges.append((None, align(floor_seen, cut)))
        old_cut = floor_day(mark.through)
        # A day that ended since the last run is recomputed whole, its hour rows dropped.
        ranges.append((old_cut if old_cut < cut else mark.through, target))
    ranges = [(lo, min(hi, target)) for lo, hi in ranges]
    ranges = [(lo, hi) for lo, hi in ranges if lo is None or lo < hi]
    day_ranges, hour_ranges = _split(ranges, cut)
    rows: list = []
    for model, unit, part in (
        (RetrievalDay, "day", day_ranges),
        (RetrievalHour, "hour", hour_ranges),
    ):
        if not part:
            continue
        groups = retrieval_rows_in(namespace, part, unit=unit, by_client=True, bounds=ids)
        for (start, client_id), unit_rows in groups.items():
            ranks, hits = encode(unit_rows)
            rows.append(
                model(
                    namespace=namespace,
                    client_id=client_id,
                    sessions=unit_rows.sessions,
                    ranks=ranks,
                    hits=hits,
                    **{unit: start},
                )
            )
    with transaction.atomic():
        current = RetrievalRollupMark.objects.select_for_update().get(namespace=namespace)
        RetrievalDay.objects.filter(
            _ranges_q("day", day_ranges, as_day=True), namespace=namespace
        ).delete()
        RetrievalHour.objects.filter(
            Q(hour__lt=cut) | _ranges_q("hour", hour_ranges), namespace=namespace
        ).delete()
        RetrievalDay.objects.bulk_create(
            [r for r in rows if isinstance(r, RetrievalDay)], batch_size=2000
        )
        RetrievalHour.objects.bulk_create(
            [r for r in rows if isinstance(r, RetrievalHour)], batch_size=2000
        )
        # A floor the retention pass moved while this ran stays for the next run.
        RetrievalRollupMark.objects.filter(namespace=namespace).update(
            through=target,
            injection_id=ids[0],
            signal_id=ids[1],
            floor=None if current.floor == floor_seen else current.floor,
        )
    return len(rows)


def rollup_all(now: datetime) -> dict:
    """Every namespace's rollup up to the hour running at ``now`` (the beat task); one run at a
    time (a cache lock)."""
    if not cache.add(LOCK, 1, LOCK_SECONDS):
        return {"skipped": 1}
    try:
        namespaces = list(Namespace.objects.order_by("name"))
        # A first run leaves a mark that says "nothing rolled up" first, so a retention pass
        # during it finds the mark and leaves its floor for the next run.
        for ns in namespaces:
            RetrievalRollupMark.objects.get_or_create(namespace=ns, defaults={"through": NOTHING})
        # The ids are read first, and the writers that may still hold lower ones are waited for:
        # the units then hold exactly the rows up to these ids.
        ids = (
            InjectionEvent.objects.aggregate(m=Max("id"))["m"] or 0,
            SignalRecord.objects.aggregate(m=Max("id"))["m"] or 0,
        )
        store.get().settle_writers()
        target = floor_hour(now)
        return {"rows": sum(rollup_namespace(ns, target, ids) for ns in namespaces)}
    finally:
        cache.delete(LOCK)


# --- what makes units stale -----------------------------------------------------------------------


def forget(before: dict[int, datetime]) -> None:
    """Rows of namespace ``n`` before ``before[n]`` were deleted: its units before that are read
    live until the next run recomputes them. Call it in the transaction that deletes them."""
    for ns_id, ts in before.items():
        RetrievalRollupMark.objects.filter(
            Q(floor__isnull=True) | Q(floor__lt=ts), namespace_id=ns_id
        ).update(floor=ts)


def forget_sessions(session_ids) -> None:
    """:func:`forget` for the sessions about to be deleted (the retention pass)."""
    rows = (
        SessionNamespace.objects.filter(session_id__in=session_ids)
        .values_list("namespace_id")
        .annotate(last=Max("ts"))
        .order_by()
    )
    forget({ns_id: last + TICK for ns_id, last in rows})
