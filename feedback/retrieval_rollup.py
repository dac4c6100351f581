"""The per-day rollup of retrieval quality: the sums of each finished UTC day, so the
dashboard's trends read a row per day and API client instead of scanning the injections.

A beat task (``feedback.tasks.retrieval_rollup``) recomputes days fully from the injections and
signals (``feedback.selectors.retrieval_rows_daily_by_client``) and replaces their rows, so a
rerun changes nothing. It rolls up every day up to ``LIVE_DAYS`` before today; those last days
are always computed live. A session recorded late with an older ts, or a used signal arriving
for an older session, makes its day *dirty*: each run finds them by the injection and signal ids
beyond the ones the last run saw and recomputes those days too.

The evaluation stays ``feedback.retrieval_quality``: the rows are the ``DayRows`` that
``merge_days`` adds up, and a day read from the rollup evaluates to the same numbers as the live
computation of that day.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime, time, timedelta

from django.core.cache import cache
from django.db import transaction
from django.db.models import Max
from django.db.models.functions import TruncDate

from feedback import retrieval_quality, utility
from feedback.models import InjectionEvent, RetrievalDay, RetrievalRollupMark, SignalRecord
from feedback.retrieval_quality import DayRows, RankRow
from feedback.selectors import retrieval_rows_daily, retrieval_rows_daily_by_client
from rms.models import Namespace

#: Today and the days before it that are always computed live, never read from the rollup.
LIVE_DAYS = 2
#: Days recomputed per query and transaction when the rollup catches up.
CHUNK_DAYS = 7
LOCK = "rms:retrieval-rollup"
LOCK_SECONDS = 3600


def midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _key(rank: int | None) -> str:
    return "" if rank is None else str(rank)


def _rank(key: str) -> int | None:
    return int(key) if key else None


def encode(rows: DayRows) -> tuple[dict, dict]:
    """The JSON of a day's rows: ``ranks`` and ``hits`` of :class:`RetrievalDay`."""
    ranks = {
        _key(r.rank): [r.injections, r.used, r.token_cost, r.used_token_cost] for r in rows.ranks
    }
    return ranks, {_key(rank): n for rank, n in rows.hits.items()}


def decode(row: RetrievalDay) -> DayRows:
    ranks = [RankRow(_rank(key), *values) for key, values in row.ranks.items()]
    return DayRows(ranks, row.sessions, Counter({_rank(k): n for k, n in row.hits.items()}))


def rollup_days(namespace, first: date, last: date, mark: dict | None = None) -> int:
    """Recompute the days ``first``..``last`` of ``namespace`` from the injections and replace
    their rows (and, with ``mark``, the namespace's mark) in one transaction. The grouped
    queries run before it. Returns the rows written."""
    groups = retrieval_rows_daily_by_client(namespace, midnight(first), _end_of(last))
    rows = []
    for (day, client_id), day_rows in groups.items():
        ranks, hits = encode(day_rows)
        rows.append(
            RetrievalDay(
                namespace=namespace,
                client_id=client_id,
                day=day,
                sessions=day_rows.sessions,
                ranks=ranks,
                hits=hits,
            )
        )
    with transaction.atomic():
        RetrievalDay.objects.filter(namespace=namespace, day__gte=first, day__lte=last).delete()
        RetrievalDay.objects.bulk_create(rows)
        if mark is not None:
            RetrievalRollupMark.objects.update_or_create(namespace=namespace, defaults=mark)
    return len(rows)


_DAY = timedelta(days=1)


def _end_of(day: date) -> datetime:
    """The last instant of ``day``: the selectors' windows include their end."""
    return midnight(day) + _DAY - timedelta(microseconds=1)


def _dirty_days(namespace, mark: RetrievalRollupMark) -> set[date]:
    """Rolled-up days with an injection or a used signal the last run did not see."""
    end = midnight(mark.through) + _DAY
    injected = (
        InjectionEvent.objects.filter(namespace=namespace, id__gt=mark.injection_id, ts__lt=end)
        .annotate(day=TruncDate("ts"))
        .values_list("day", flat=True)
        .distinct()
    )
    signalled = (
        SignalRecord.objects.filter(
            namespace=namespace,
            id__gt=mark.signal_id,
            signal_type__in=utility.USED_SIGNALS,
            feedback_session__ts__lt=end,
        )
        .annotate(day=TruncDate("feedback_session__ts"))
        .values_list("day", flat=True)
        .distinct()
    )
    return set(injected.order_by()) | set(signalled.order_by())


def rollup_namespace(namespace, today: date) -> int:
    """Bring ``namespace``'s rollup up to ``LIVE_DAYS`` before ``today``: recompute its dirty
    days, then the days not yet rolled up, ``CHUNK_DAYS`` at a time. Returns the rows written."""
    target = today - timedelta(days=LIVE_DAYS)
    # The ids are read first: what is inserted while this runs is seen by the next run.
    ids = {
        "injection_id": InjectionEvent.objects.aggregate(m=Max("id"))["m"] or 0,
        "signal_id": SignalRecord.objects.aggregate(m=Max("id"))["m"] or 0,
    }
    mark = RetrievalRollupMark.objects.filter(namespace=namespace).first()
    first_ts = (
        InjectionEvent.objects.filter(namespace=namespace)
        .order_by("ts")
        .values_list("ts", flat=True)
        .first()
    )
    oldest = first_ts.astimezone(UTC).date() if first_ts else target + _DAY
    written = 0
    if mark is None:
        start = oldest
    else:
        # The retention pass deletes the oldest sessions: the days before the oldest injection
        # left lose their rows, and that day, perhaps cut in part, is recomputed.
        RetrievalDay.objects.filter(namespace=namespace, day__lt=oldest).delete()
        dirty = _dirty_days(namespace, mark)
        if oldest <= mark.through:
            dirty.add(oldest)
        for day in sorted(dirty):
            written += rollup_days(namespace, day, day)
        start = mark.through + _DAY
    while start <= target:
        end = min(start + timedelta(days=CHUNK_DAYS - 1), target)
        written += rollup_days(namespace, start, end, {"through": end, **ids})
        start = end + _DAY
    through = max(target, mark.through) if mark else target
    RetrievalRollupMark.objects.update_or_create(
        namespace=namespace, defaults={"through": through, **ids}
    )
    return written


def rollup_all(now: datetime) -> dict:
    """Every namespace's rollup (the beat task); one run at a time (a cache lock)."""
    if not cache.add(LOCK, 1, LOCK_SECONDS):
        return {"skipped": 1}
    try:
        today = now.astimezone(UTC).date()
        rows = sum(rollup_namespace(ns, today) for ns in Namespace.objects.order_by("name"))
        return {"rows": rows}
    finally:
        cache.delete(LOCK)


def retrieval_days(
    namespace,
    since: datetime | None = None,
    until: datetime | None = None,
    actor_id: str | None = None,
) -> dict[date, DayRows]:
    """``feedback.selectors.retrieval_rows_daily`` with the whole days inside the window that
    are rolled up read from the rollup, and the rest (a partial first day, the days after the
    mark) computed live: the same rows, in one small read plus a bounded live part. ``since``
    None is from the first injection, ``until`` None up to the last: the dashboard's trends
    and the API's ``/retrieval-quality`` (:func:`retrieval_window`) both read this."""
    mark = RetrievalRollupMark.objects.filter(namespace=namespace).first()
    if mark is None:
        return retrieval_rows_daily(namespace, since, until, actor_id)
    first = None
    if since is not None:
        since_day = since.astimezone(UTC).date()
        first = since_day if since == midnight(since_day) else since_day + _DAY
    last = mark.through
    if until is not None:
        last = min(last, until.astimezone(UTC).date() - _DAY)
    if first is not None and first > last:
        return retrieval_rows_daily(namespace, since, until, actor_id)
    days: dict[date, list[DayRows]] = {}
    rolled = RetrievalDay.objects.filter(namespace=namespace, day__lte=last)
    if first is not None:
        rolled = rolled.filter(day__gte=first)
    if actor_id is not None:
        rolled = rolled.filter(client__name=actor_id)
    for row in rolled.order_by("day", "client_id"):
        days.setdefault(row.day, []).append(decode(row))
    answer = {day: retrieval_quality.merge_days(parts) for day, parts in days.items()}
    # Without ``since`` the rollup holds every day up to the mark (it starts at the first
    # injection's day, and a later injection with an older ts makes its day dirty).
    if first is not None and since < midnight(first):
        answer.update(retrieval_rows_daily(namespace, since, _end_of(first - _DAY), actor_id))
    tail = midnight(last) + _DAY
    if until is None or tail <= until:
        answer.update(retrieval_rows_daily(namespace, tail, until, actor_id))
    return dict(sorted(answer.items()))


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
