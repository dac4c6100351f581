"""The IGNORED_REPEATEDLY sweep (SPEC §9, RFC-0009 §7), as a service the worker task calls.

An object is a *candidate* when its aggregate has ``unused_streak ≥ N`` (its namespace's
``ignore_threshold``) and its streak gained a session since its last IGNORED_CHECK
(``unused_sessions > checked_unused_sessions``). Every candidate gets exactly one IGNORED_CHECK
operation with the decision and its reasons; when the penalty applies, a FEEDBACK_EVENT and a
PENALTY follow on the same chain and the streak resets to 0.

Transactions: the candidates are read without locks, then handled in chunks of ``CHUNK`` objects,
one transaction per chunk. A chunk locks its objects once, in primary-key order (the order every
writer uses, so the sweep cannot deadlock with ingestion), re-reads their aggregates under the
lock and re-checks the candidate condition, because a session or a concurrent sweep may have
changed it since the unlocked read: an object checked by one sweep is no longer a candidate
when a concurrent one gets its lock, so it is decided once. ``lo``/``hi`` restrict a sweep to a
key range: the worker task fans a sweep out over Celery as key-range chunks
(``taskruns``), which is how a sweep uses more than one core or machine. A crash leaves
finished chunks committed and the rest untouched; as a checked object is no longer a candidate,
a rerun finishes the job and ends in the same state as one clean run. Nothing here retries; the
task that calls :func:`sweep` may simply run it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from feedback import aggregates, relevance
from feedback.apply import apply_signal
from feedback.models import FeedbackAggregate, FeedbackSession, InjectionEvent, SignalRecord
from feedback.services import load_aggregates, write_aggregates
from rms import gcpause, oplog, policy
from rms import services as core
from rms.models import MemoryObject, Namespace, Operation
from rms.store import Select
from rms.store import get as storage

logger = logging.getLogger(__name__)

#: Objects per transaction: bounds lock time and memory; a crash loses at most one chunk's work.
CHUNK = 500
#: With a progress callback, a chunk is at most this share of the candidates (an operator sees
#: progress at least every 2 %), and at least MIN_PROGRESS_CHUNK objects (a small sweep takes
#: well under a second in all).
PROGRESS_STEP = 0.02
MIN_PROGRESS_CHUNK = 20
SIGNAL_TYPE = policy.IGNORED_REPEATEDLY
DETECTION_METHOD = "injection_tracking"
ACTOR = core.Actor("ignored-sweep", "SYSTEM_PROCESS")
#: The penalty's session_id: the sweep is not a conversation, but every signal carries one.
SESSION_ID = "ignored-sweep"


#: Every column a write of the sweep may change on an object.
OBJECT_FIELDS = list(MemoryObject.WRITABLE_FIELDS)


def candidates(
    namespace: Namespace | str | None = None,
    object_ids: Iterable | None = None,
    lo=None,
    hi=None,
):
    """The aggregates of candidate objects (unlocked; the sweep re-checks under the lock), with
    object ids in ``[lo, hi)`` when given."""
    qs = FeedbackAggregate.objects.filter(
        unused_streak__gte=F("namespace__ignore_threshold"),
        unused_sessions__gt=F("checked_unused_sessions"),
    )
    if namespace is not None:
        qs = qs.filter(namespace__name=namespace if isinstance(namespace, str) else namespace.name)
    if object_ids is not None:
        qs = qs.filter(object_id__in=list(object_ids))
    if lo is not None:
        qs = qs.filter(object_id__gte=lo)
    if hi is not None:
        qs = qs.filter(object_id__lt=hi)
    return qs


@dataclass
class Summary:
    examined: int = 0
    penalized: int = 0
    exempt: int = 0
    not_penalized: int = 0
    skipped_domain_checks: int = 0
    namespaces: set[str] = field(default_factory=set)

    def count(self, namespace: str, decision: relevance.SweepDecision) -> None:
        self.namespaces.add(namespace)
        self.examined += 1
        if decision.apply_penalty:
            self.penalized += 1
            if decision.domain_check == relevance.DOMAIN_CHECK_SKIPPED:
                self.skipped_domain_checks += 1
        elif decision.exemptions:
            self.exempt += 1
        else:
            self.not_penalized += 1

    def add(self, other: Summary) -> None:
        self.examined += other.examined
        self.penalized += other.penalized
        self.exempt += other.exempt
        self.not_penalized += other.not_penalized
        self.skipped_domain_checks += other.skipped_domain_checks
        self.namespaces |= other.namespaces

    def as_dict(self) -> dict:
        return {
            "examined": self.examined,
            "penalized": self.penalized,
            "exempt": self.exempt,
            "not_penalized": self.not_penalized,
            "skipped_domain_checks": self.skipped_domain_checks,
            "namespaces": sorted(self.namespaces),
        }


def sweep(
    *,
    namespace: Namespace | str | None = None,
    object_ids: Iterable | None = None,
    progress: Callable[[float], None] | None = None,
    now: datetime | None = None,
    chunk_size: int = CHUNK,
    lo=None,
    hi=None,
    contexts: SessionContexts | None = None,
) -> dict:
    """Examine every candidate object (SPEC §9) and return what was decided.

    ``namespace`` (a Namespace or its name), ``object_ids`` and the key range ``[lo, hi)``
    restrict the candidates.
    ``progress(fraction)`` is called after each committed chunk (never while locks are held).
    ``now`` is the check time (default: the time each chunk takes its locks); an object whose
    chain is already later is checked at its latest operation's time, so no chain goes back.

    One transaction per chunk of ``chunk_size`` objects (a savepoint inside a caller's
    transaction); see the module docstring for locking and crash behaviour. ``contexts``: the
    streak sessions' contexts to reuse (the chunks of one fanned-out run share one, as the
    chunks of one call do).
    Returns ``{"examined", "penalized", "exempt", "not_penalized", "skipped_domain_checks",
    "namespaces"}``; ``examined`` is the sum of the three outcomes, ``skipped_domain_checks``
    counts penalties applied without a domain check (all streak sessions unknown), and
    ``namespaces`` names those where at least one object was examined.
    """
    core.check_not_future(now, "now")
    if object_ids is not None:
        object_ids = list(object_ids)
    qs = candidates(namespace, object_ids, lo, hi)
    total = 0  # only progress needs it (a fanned-out chunk has none)
    if progress is not None:
        total = qs.count()
        # at most PROGRESS_STEP of the work per chunk, but not absurdly small chunks
        chunk_size = min(chunk_size, max(MIN_PROGRESS_CHUNK, int(total * PROGRESS_STEP)))
    summary = Summary()
    done = 0

    def chunk_done(size: int, part: Summary) -> None:
        nonlocal done
        summary.add(part)
        done += size
        if progress is not None:
            progress(min(1.0, done / total) if total else 1.0)

    if contexts is None:
        contexts = SessionContexts()
    for ids in _pages(qs, chunk_size):
        chunk_done(len(ids), _run_chunk(ids, now, contexts))
    if progress is not None and done == 0:
        progress(1.0)
    return summary.as_dict()


def _pages(qs, size: int):
    """Candidate ids in pages of ``size``: keyset pagination in pk order, so memory stays bounded
    whatever the number of candidates and chunks lock disjoint, increasing key ranges."""
    last = None
    while True:
        page = qs if last is None else qs.filter(object_id__gt=last)
        ids = list(page.order_by("object_id").values_list("object_id", flat=True)[:size])
        if not ids:
            return
        last = ids[-1]
        yield ids


def _run_chunk(ids: list, now: datetime | None, contexts: SessionContexts) -> Summary:
    part = Summary()
    with gcpause.paused(), transaction.atomic():
        _sweep_chunk(ids, now, part, contexts)
    return part


# --- one chunk ------------------------------------------------------------------------------------


@dataclass
class _Writes:
    ops: list[Operation] = field(default_factory=list)
    signals: list[SignalRecord] = field(default_factory=list)
    objects: list[MemoryObject] = field(default_factory=list)


def _sweep_chunk(
    ids: list, now: datetime | None, summary: Summary, contexts: SessionContexts
) -> None:
    """Lock, re-read, re-check, decide and write one chunk; the caller holds the transaction."""
    db = storage()
    with db.key_lookups():
        _sweep_locked(db, ids, now, summary, contexts)


def _sweep_locked(
    db, ids: list, now: datetime | None, summary: Summary, contexts: SessionContexts
) -> None:
    # Every statement of a chunk reads or writes its objects' rows by key (rms.store).
    objects = db.lock_objects(ids)
    ledger = load_aggregates(objects)
    at = now if now is not None else timezone.now()  # taken under the locks (SPEC §6)
    todo: list[tuple[MemoryObject, aggregates.Aggregate]] = []
    for obj in objects.values():
        agg = ledger.get(obj.pk)
        if aggregates.is_sweep_candidate(agg, obj.namespace.ignore_threshold):
            todo.append((obj, agg))
    if not todo:
        return
    streak_sessions = _streak_sessions({obj.pk: agg.unused_streak for obj, agg in todo})
    contexts.load({s for sessions in streak_sessions.values() for s in sessions})
    tallies = policy.TallyLedger()  # a penalty never reads or moves a session tally
    writes = _Writes()
    for obj, _ in todo:
        decision = _check_object(
            obj, ledger, streak_sessions.get(obj.pk, []), contexts, at, tallies, writes
        )
        summary.count(obj.namespace.name, decision)
    # Operations go in list order, so seq follows each chain: IGNORED_CHECK, FEEDBACK_EVENT,
    # PENALTY.
    with db.batched():
        db.insert(Operation, writes.ops)
        db.insert(SignalRecord, writes.signals)
        db.update(MemoryObject, writes.objects, OBJECT_FIELDS)
        namespace_of = {pk: obj.namespace_id for pk, obj in objects.items()}
        write_aggregates(db, ledger.changes(), namespace_of)


def _check_object(
    obj: MemoryObject,
    ledger: aggregates.Ledger,
    sessions: list,
    contexts: SessionContexts,
    now: datetime,
    tallies: policy.TallyLedger,
    writes: _Writes,
) -> relevance.SweepDecision:
    ns = obj.namespace
    agg = ledger.get(obj.pk)  # the candidate's aggregate, as re-read under the lock
    streak = agg.unused_streak
    subject = relevance.Subject.of(obj.domain_tags, obj.content)
    threshold = ns.relevance_threshold
    classifications = [relevance.classify(contexts.get(s), subject, threshold) for s in sessions]
    # Fewer recorded injections than the streak would be a broken invariant (every session that
    # grows the streak stores its injection). Sessions we cannot see are sessions we cannot
    # judge: "unknown", as RFC-0009 §7 treats them, and said in the payload.
    missing = streak - len(classifications)
    if missing > 0:
        logger.warning("object %s: %d streak session(s) have no injection row", obj.pk, missing)
        classifications += [relevance.UNKNOWN] * missing
    decision = relevance.sweep_decision(
        decay_profile=obj.decay_profile,
        pinned=obj.pinned,
        epistemic_type=obj.epistemic_type,
        unused_streak=streak,
        classifications=classifications,
        threshold=ns.ignore_threshold,
    )
    ts = max(now, obj.last_op_ts)  # a chain's time never goes back (SPEC §6)
    payload = {
        **decision.as_payload(),
        "applied": decision.apply_penalty,
        "unused_sessions": agg.unused_sessions,
        "unused_streak": streak,
        "threshold": ns.ignore_threshold,
        "relevance_threshold": ns.relevance_threshold,
        "streak_feedback_session_ids": sessions,
    }
    if missing > 0:
        payload["sessions_missing"] = missing
    key = oplog.ChainKey.of(obj)  # once for the object's two or three operations
    check = oplog.ignored_check(
        obj, ts=ts, payload=payload, actor_id=ACTOR.id, actor_type=ACTOR.type, key=key
    )
    writes.ops.append(check)
    aggregates.on_ignored_check(agg, agg.unused_sessions)
    if decision.apply_penalty:
        signal = policy.Signal(
            signal_type=SIGNAL_TYPE,
            detection_method=DETECTION_METHOD,
            actor_id=ACTOR.id,
            actor_type=ACTOR.type,
            session_id=SESSION_ID,
            ts=ts,
            evidence_ids=(),
        )
        # Not UNUSED, so this also resets the streak to 0 (SPEC §8, §9).
        applied = apply_signal(
            obj,
            signal,
            tallies=tallies,
            ledger=ledger,
            extra={"ignored_check_id": str(check.id), "unused_streak": streak},
            key=key,
            automatic=True,
        )
        writes.ops.extend(applied.ops)
        writes.signals.append(applied.record)
    writes.objects.append(obj)
    return decision


# --- streak sessions ------------------------------------------------------------------------------


def _streak_sessions(streaks: dict) -> dict[object, list]:
    """{object id: feedback session ids (as text) of its last ``streak`` injections, newest
    first}. Text, not UUID objects: they key caches and go into payloads as text, and a str
    hashes once where a UUID computes its hash in Python every time.

    One query for the whole chunk (``rms.store``'s ``newest_per_key``). Newest first is ``ts``
    then ``id`` descending: ``id`` follows insertion and so ``seq`` order within one time.
    """
    return storage().newest_per_key(
        InjectionEvent, "object_id", streaks, "session_id", ("ts", "id")
    )


SESSION_CONTEXT_COLUMNS = ("id", "context_tags", "context_text")


class SessionContexts:
    """The streak sessions' :class:`relevance.Context`, kept for the whole run: a session's tags
    and text never change once recorded, and one session is a streak session of many objects in
    many chunks, so each is normalised (and its text tokenised) once."""

    #: Sessions kept at most; beyond this the cache starts over (memory stays bounded).
    MAX_SESSIONS = 200_000

    def __init__(self) -> None:
        self._sessions: dict[str, relevance.Context] = {}

    def load(self, session_ids: set) -> None:
        missing = [s for s in session_ids if s not in self._sessions]
        if not missing:
            return
        if len(self._sessions) + len(missing) > self.MAX_SESSIONS:
            self._sessions.clear()
            missing = list(session_ids)
        (rows,) = storage().read(
            [Select(FeedbackSession, where={"id": missing}, columns=SESSION_CONTEXT_COLUMNS)]
        )
        for pk, tags, text in rows:
            self._sessions[str(pk)] = relevance.Context.of(tags, text)

    def get(self, session_id: str) -> relevance.Context:
        # A session row we cannot find is one we cannot judge: "unknown".
        return self._sessions.get(session_id, relevance.NO_CONTEXT)
