"""Feedback-session ingestion (SPEC §7): one service for the single and the batch endpoint.

Validate (the API layer), analyse, load, plan, write, answer. The response analysis of ``detect``
sessions runs first, outside any transaction: it is CPU work on text (up to a second a session),
and a write transaction held open that long holds the change feed back for every namespace
(API.md). Then a call is one transaction: it reads, in one ``rms.store`` read, the stored records
of its request ids and locks every object any of its sessions touches, once and in primary-key
order; ``feedback.planner`` turns that state, the bodies and their analyses into rows and
answers; the rows go out in a few bulk writes.

Idempotency (``rms.idempotency``): ``(client, request_id)`` is unique on the session row. Two
requests racing with the same key: the loser's transaction fails on the unique key, is rolled
back and re-run, and then answers from the winner's record; that is the only retry this module
makes.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from analysis import api as detection
from feedback import aggregates, planner, selectors, services, session_record
from feedback.models import FeedbackSession, InjectionEvent, SessionNamespace, SignalRecord
from feedback.planner import Answer, Changes, Events, Item, Loaded, SessionPlan
from rms import gcpause, store
from rms import services as core
from rms.errors import DomainError
from rms.models import ApiClient, MemoryObject, Namespace, Operation, SessionTally
from taskruns import enqueue

__all__ = ["MAX_BATCH", "OBJECT_FIELDS", "Item", "record_one", "record_sessions"]

MAX_BATCH = 500
RACE_RETRIES = 3
#: While pipelining, the event rows are sent every this many sessions (~1,200 operations).
SEND_EVERY = 50
OBJECT_FIELDS = list(MemoryObject.WRITABLE_FIELDS)


def record_sessions(*, client: ApiClient, items: list[Item]) -> list[Answer]:
    """Process session bodies in order; returns (status, record) per item, or (status,
    DomainError) for an item refused (the API layer renders it)."""
    _analyse(client, [item for item in items if item.error is None])
    pending = [item for item in items if item.error is None]
    for attempt in range(RACE_RETRIES):
        for item in pending:
            item.result = item.record_json = item.duplicate_of = None
        try:
            with gcpause.paused():  # see rms.gcpause: a sixth of a batch's CPU otherwise
                _record(client, pending)
            break
        except IntegrityError:
            if attempt == RACE_RETRIES - 1:
                raise
    return [(item.error.status, item.error) if item.error else item.result for item in items]


def record_one(*, client: ApiClient, data: dict, body_hash: str) -> Answer:
    """The single endpoint: a batch of one."""
    return record_sessions(client=client, items=[Item(data, body_hash)])[0]


def _analyse(client: ApiClient, items: list[Item]) -> None:
    """Run the response analysis of every ``detect`` session (``item.detected``), before any
    transaction opens; a session over the analysis' bounds or past the request's budget is
    refused (``item.error``). A session whose ``request_id`` is stored already, or repeats an
    earlier item's, is answered from that record (the planner) and not analysed: the stored
    request ids are read first, without a lock (a stored session is never removed). The
    objects' contents are read without a lock too: the analysis only proposes signals, and the
    planner checks every object again under its lock (an object the client may not use
    refuses the session, whatever the analysis found)."""
    detect = [item for item in items if item.data.get("detect")]
    if not detect:
        return
    stored = selectors.stored_request_ids(client, {item.data["request_id"] for item in detect})
    budget = services.AnalysisBudget()
    wanted = []
    for item in detect:
        request_id = item.data["request_id"]
        if request_id in stored:
            continue
        silent = planner.silent_injections(item.data)
        try:
            services.check_analysis(item.data["response_text"], len(silent), "injections")
            budget.spend(item.data["response_text"], len(silent))
        except DomainError as exc:
            item.error = exc
            continue
        stored.add(request_id)  # a later item with this key answers from this one
        wanted.append((item, silent))
    ids = {oid for _, silent in wanted for oid in silent}
    if not ids:
        return
    contents = dict(MemoryObject.objects.filter(pk__in=ids).values_list("pk", "content"))
    scorer = detection.service_scorer()
    for item, silent in wanted:
        known = [oid for oid in silent if oid in contents]
        found = detection.analyse(
            item.data["response_text"],
            [detection.DetectionInput(str(oid), contents[oid]) for oid in known],
            scorer,
        )
        item.detected = dict(zip(known, found, strict=True))


def _record(client: ApiClient, pending: list[Item]) -> None:
    if not pending:
        return
    db = store.get()
    with transaction.atomic():
        plan = SessionPlan(client, load_state(client, pending))
        # PostgreSQL: every write is sent as it is issued, and the server inserts one chunk of
        # sessions while the next is planned; errors surface at the end of the block.
        with db.pipelined():
            every = SEND_EVERY if db.pipelining() else None
            for events in plan.sessions(pending, every=every):
                _write_events(db, events)
            if plan.planned:
                _write_changes(db, plan.changes(), plan.loaded.objects)
        _schedule_sweep(plan)


def load_state(client: ApiClient, pending: list[Item]) -> Loaded:
    """One ``rms.store`` read (one round trip on PostgreSQL). The objects' select takes the
    locks; the aggregates and tallies are read by later selects, so they are the values
    committed before the locks were granted (``rms.store.base.Store.read``). The tallies read
    are those of every signal the planner will apply, the analyser's included."""
    data = [item.data for item in pending]
    object_ids = {e["object_id"] for d in data for k in ("injections", "signals") for e in d[k]}
    pair_list = sorted(planner.tally_pairs(pending), key=lambda p: (str(p[0]), p[1]))
    selects = [
        store.Select(
            FeedbackSession,
            where={"client_id": client.pk, "request_id": {d["request_id"] for d in data}},
        ),
        store.Select(Namespace, where={"name": {n for d in data for n in d["namespace_scope"]}}),
        store.Select(MemoryObject, where={"id": object_ids}, lock=True),
        services.aggregate_select(object_ids),
        store.Select(SessionTally, pairs=(("object_id", "session_id"), pair_list)),
    ]
    if not client.sees_all_namespaces:
        selects.append(
            store.Select(
                ApiClient.namespaces.through,
                where={"apiclient_id": client.pk},
                columns=("namespace_id",),
            )
        )
    found = store.get().read(selects)
    session_record.fill(found[0])  # retried requests answer from their records: one query
    objects = {obj.pk: obj for obj in found[2]}
    return Loaded(
        stored={s.request_id: s for s in found[0]},
        namespaces={ns.name: ns for ns in found[1]},
        objects=objects,
        aggregates=services.aggregate_ledger(found[3]),
        tallies=core.tally_ledger(found[4]),
        visible=None if client.sees_all_namespaces else frozenset(r[0] for r in found[5]),
    )


def _write_events(db: store.Store, events: Events) -> None:
    """Insert planned event rows; operations in list order, so ``seq`` follows each chain."""
    db.insert(Operation, events.ops)
    db.insert(InjectionEvent, events.injections)
    db.insert(SignalRecord, events.signals)
    db.insert(FeedbackSession, events.sessions)
    db.insert(SessionNamespace, events.scopes)


def _write_changes(db: store.Store, changes: Changes, objects: dict) -> None:
    """Update the objects, then write their tallies and aggregates."""
    db.update(MemoryObject, changes.objects, OBJECT_FIELDS)
    core.write_tallies(db, changes.tallies)
    services.write_aggregates(
        db, changes.aggregates, {pk: obj.namespace_id for pk, obj in objects.items()}
    )


def _schedule_sweep(plan: SessionPlan) -> None:
    """After commit, sweep the objects whose streak this call took to their namespace's
    threshold (SPEC §9), so a penalty does not wait for the periodic sweep. Judged on the
    aggregates at the end of the call: a later session of the batch may have reset a streak.
    Registered inside the transaction, so a rolled-back call (or its retry) enqueues nothing."""
    thresholds = {ns.pk: ns.ignore_threshold for ns in plan.loaded.namespaces.values()}
    objects, aggs = plan.loaded.objects, plan.loaded.aggregates
    ids = sorted(
        (
            pk
            for pk in plan.streak_grew
            if aggregates.is_sweep_candidate(aggs.get(pk), thresholds[objects[pk].namespace_id])
        ),
        key=str,
    )
    if ids:
        # robust: the data is committed whatever happens to the broker; a failed enqueue is
        # logged and the periodic sweep picks the objects up.
        transaction.on_commit(lambda: enqueue.sweep_objects(ids), robust=True)
