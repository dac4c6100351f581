"""Feedback-session ingestion (SPEC §7): one engine for the single and the batch endpoint.

A call is one transaction. It locks every object any of its sessions touches, once and in
primary-key order, then processes the sessions in order in memory. Each session is checked in
full before anything of it is applied, so a bad session is answered with its error and leaves
nothing behind while the others go ahead. Everything is then written with a few bulk inserts.

Idempotency: ``(client, request_id)`` is unique. A retry with the same body answers 200 with
the stored record, a changed body 409. Two requests racing with the same key: the loser's
transaction fails on the unique key, is rolled back and re-run, and then answers from the
winner's record; that is the only retry this module makes.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from statistics import fmean
from typing import ClassVar

from django.db import IntegrityError, transaction

from feedback import aggregates, detection, embedding
from feedback.models import (
    FeedbackSession,
    InjectionEvent,
    SessionNamespace,
    SignalRecord,
)
from feedback.services import (
    AggregateStore,
    aggregate_select,
    aggregates_of_rows,
    signal_record_row,
)
from rms import bulk, gcpause, oplog, policy, store
from rms import services as core
from rms.api.errors import error_body
from rms.errors import DomainError
from rms.models import (
    GENESIS_HASH,
    ApiClient,
    MemoryObject,
    Namespace,
    Operation,
    SessionTally,
    new_row,
)
from rms.replay import iso
from rms.store import attach_namespaces

MAX_BATCH = 500
AUTO_UNUSED_METHOD = "injection_tracking"  # the service's own deterministic injection tracking
DETECTED_METHOD = "response_analysis"  # LOW reliability, 0.5 discount (SPEC §2)
RACE_RETRIES = 3
#: While pipelining, the event rows are sent every this many sessions (~1,200 operations).
SEND_EVERY = 50


@dataclass
class Item:
    """One session body: validated ``data`` (or an ``error``) and its canonical-JSON hash."""

    data: dict | None
    body_hash: str
    error: tuple[int, dict] | None = None
    result: tuple[int, dict] | None = None
    duplicate_of: Item | None = None
    #: The JSON text of ``result``'s record when this call created it: encoded once, for the
    #: stored row and for the batch answer (``feedback.api.views.batch_answer``).
    record_json: str | None = None


def failure(exc: DomainError) -> tuple[int, dict]:
    return exc.status, error_body(exc.code, exc.message, exc.fields)


def conflict(request_id: str) -> tuple[int, dict]:
    return failure(
        DomainError(
            "idempotency_mismatch",
            f"request_id {request_id!r} was already used with a different body.",
            409,
        )
    )


@dataclass(eq=False)
class SessionRow:
    """A ``FeedbackSession`` row as built (its columns), with its record's JSON text, encoded
    once for the stored row and for the batch answer (``rms.store`` writes it as it is)."""

    JSON_TEXTS: ClassVar[dict] = {"record": "record_json"}

    id: uuid.UUID
    client_id: int
    request_id: str
    body_hash: str
    session_id: str
    ts: datetime
    namespace_scope: list
    context_budget: int
    tokens_used: int
    context_text: str
    context_tags: list
    outcome: str | None
    record: dict | None
    head_hash: str
    last_op_ts: datetime
    record_json: str | None = None

    @property
    def pk(self) -> uuid.UUID:  # a chain target (``rms.oplog.ChainTarget``)
        return self.id


@dataclass
class Writes:
    """Rows built in memory during a call: the event rows are inserted by :meth:`send` (every
    ``SEND_EVERY`` sessions when pipelining, and at the end), the objects, tallies and
    aggregates they change are written once at the end (``_flush``)."""

    sessions: list[SessionRow] = field(default_factory=list)
    scopes: list[SessionNamespace] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)
    injections: list[InjectionEvent] = field(default_factory=list)
    signals: list[SignalRecord] = field(default_factory=list)
    touched: dict = field(default_factory=dict)
    #: Injected objects whose unused streak grew in this call (the sweep trigger, SPEC §9).
    streak_grew: set = field(default_factory=set)
    #: Sessions applied so far in this call.
    built: int = 0

    def send(self) -> None:
        """Insert the event rows of the sessions applied so far (each complete: an injection's
        ``ended_unused`` is set when its session ends). Operations go in list order, so ``seq``
        follows each chain's order."""
        for model, rows in (
            (Operation, self.ops),
            (InjectionEvent, self.injections),
            (SignalRecord, self.signals),
            (FeedbackSession, self.sessions),
            (SessionNamespace, self.scopes),
        ):
            bulk.insert(model, rows)
            rows.clear()


OBJECT_FIELDS = list(MemoryObject.WRITABLE_FIELDS)


def record_sessions(*, client: ApiClient, items: list[Item]) -> list[tuple[int, dict]]:
    """Process session bodies in order; returns (status, record or error body) per item."""
    pending = [item for item in items if item.error is None]
    for attempt in range(RACE_RETRIES):
        for item in pending:
            item.result = item.record_json = None
        try:
            with gcpause.paused():  # see rms.gcpause: a sixth of a batch's CPU otherwise
                _record(client, pending)
            break
        except IntegrityError:
            if attempt == RACE_RETRIES - 1:
                raise
    return [item.error or item.result for item in items]


def _record(client: ApiClient, pending: list[Item]) -> None:
    if not pending:
        return
    with transaction.atomic():
        request_ids = {item.data["request_id"] for item in pending}
        names = {name for item in pending for name in item.data["namespace_scope"]}
        object_ids = {
            entry["object_id"]
            for item in pending
            for key in ("injections", "signals")
            for entry in item.data[key]
        }
        pairs = {
            (entry["object_id"], item.data["session_id"])
            for item in pending
            for entry in item.data["signals"]
        }
        loaded = _load(client, request_ids, names, object_ids, pairs)
        stored, namespaces, objects = loaded.stored, loaded.namespaces, loaded.objects
        tallies, aggs = loaded.tallies, loaded.aggregates
        names_by_id = {ns.pk: ns.name for ns in namespaces.values()}
        keys = {
            pk: oplog.ChainKey.of(obj, names_by_id.get(obj.namespace_id))
            for pk, obj in objects.items()
        }

        first: dict[str, Item] = {}
        todo: list[Item] = []
        for item in pending:
            request_id = item.data["request_id"]
            previous = stored.get(request_id)
            if previous is not None:
                same = previous.body_hash == item.body_hash
                item.result = (200, previous.record) if same else conflict(request_id)
            elif request_id in first:
                item.duplicate_of = first[request_id]
            else:
                first[request_id] = item
                todo.append(item)

        writes = Writes()
        # PostgreSQL: every write is sent as it is issued and the server inserts one chunk of
        # sessions while the next is built (rms.bulk.pipelined); errors surface at the end.
        with bulk.pipelined():
            for item in todo:
                try:
                    ts = _check(item.data, objects, namespaces, loaded.visible)
                except DomainError as exc:
                    item.result = failure(exc)
                    continue
                item.result = (
                    201,
                    _apply(client, item, ts, objects, keys, namespaces, tallies, aggs, writes),
                )
                writes.built += 1
                if writes.built % SEND_EVERY == 0 and bulk.pipelining():
                    writes.send()
            _flush(writes, tallies, aggs)

        for item in pending:
            if item.duplicate_of is not None:
                original = item.duplicate_of
                if original.body_hash != item.body_hash:
                    item.result = conflict(item.data["request_id"])
                elif original.result[0] == 201:
                    item.result = (200, original.result[1])
                    item.record_json = original.record_json
                else:
                    item.result = original.result

        _schedule_sweep(writes.streak_grew, objects, aggs)


@dataclass
class Loaded:
    """What a call reads before it plans: the stored sessions of its request ids, the
    namespaces of its scopes, the objects it touches (locked), their aggregates and tallies,
    and the ids of the namespaces the client may see (None: all of them)."""

    stored: dict
    namespaces: dict
    objects: dict
    aggregates: AggregateStore
    tallies: core.TallyStore
    visible: frozenset | None


def _load(client: ApiClient, request_ids, names, object_ids, pairs) -> Loaded:
    """One ``rms.store`` read (one round trip on PostgreSQL). The objects' select takes the
    locks; the aggregates and tallies are read by later selects, so they are the values
    committed before the locks were granted (``rms.store.base.Store.read``)."""
    pair_list = sorted(pairs, key=lambda p: (str(p[0]), p[1]))
    selects = [
        store.Select(FeedbackSession, where={"client_id": client.pk, "request_id": request_ids}),
        store.Select(Namespace, where={"name": names}),
        store.Select(MemoryObject, where={"id": object_ids}, lock=True),
        aggregate_select(object_ids),
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
    namespaces = {ns.name: ns for ns in found[1]}
    objects = attach_namespaces(found[2], namespaces.values())
    return Loaded(
        stored={s.request_id: s for s in found[0]},
        namespaces=namespaces,
        objects=objects,
        aggregates=AggregateStore(list(objects.values()), aggregates_of_rows(found[3])),
        tallies=core.TallyStore.of_rows(found[4]),
        visible=None if client.sees_all_namespaces else frozenset(r[0] for r in found[5]),
    )


def _schedule_sweep(grew: set, objects: dict, store: AggregateStore) -> None:
    """After commit, sweep the objects whose streak this call took to their namespace's
    threshold (SPEC §9), so a penalty does not wait for the periodic sweep. Judged on the
    aggregates at the end of the call: a later session of the batch may have reset a streak.
    Registered inside the transaction, so a rolled-back call (or its retry) enqueues nothing."""
    from feedback import sweep  # sweep imports this module

    ids = sorted(
        (
            pk
            for pk in grew
            if sweep.is_candidate(store.get(pk), objects[pk].namespace.ignore_threshold)
        ),
        key=str,
    )
    if ids:
        # robust: the data is committed whatever happens to the broker; a failed enqueue is
        # logged and the periodic sweep picks the objects up.
        transaction.on_commit(lambda: sweep.enqueue_sweep(ids), robust=True)


def _check(data: dict, objects: dict, namespaces: dict, visible: frozenset | None) -> datetime:
    """Everything that can refuse a session, before any of it is applied; returns its ts.
    ``visible``: ids of the namespaces the client may see, None for all."""
    scope = data["namespace_scope"]
    for name in scope:
        ns = namespaces.get(name)
        if visible is not None and (ns is None or ns.pk not in visible):
            raise DomainError("forbidden", f"You may not write to namespace {name!r}.", 403)
        if name not in namespaces:
            raise DomainError(
                "unknown_namespace",
                f"Namespace {name!r} does not exist.",
                400,
                {"namespace_scope": [f"Unknown namespace {name!r}."]},
            )
    scope_ids = {namespaces[name].pk for name in scope}
    fields: dict[str, list[str]] = {}
    injected = set()
    for i, inj in enumerate(data["injections"]):
        if inj["object_id"] in injected:
            fields[f"injections.{i}.object_id"] = ["Injected twice in this session."]
        injected.add(inj["object_id"])
    unused_seen = set()
    for key in ("injections", "signals"):
        for i, entry in enumerate(data[key]):
            obj = objects.get(entry["object_id"])
            if obj is None or obj.namespace_id not in scope_ids:
                fields[f"{key}.{i}.object_id"] = ["Unknown object, or outside namespace_scope."]
            if key == "signals":
                try:
                    core.validate_client_signal(entry["signal_type"], entry.get("detection_method"))
                except DomainError as exc:
                    for name, messages in (exc.fields or {}).items():
                        fields[f"signals.{i}.{name}"] = messages
                if entry["signal_type"] == "UNUSED":
                    if entry["object_id"] in unused_seen:
                        fields[f"signals.{i}.signal_type"] = ["At most one UNUSED per object."]
                    unused_seen.add(entry["object_id"])
    if fields:
        raise DomainError("validation_error", "The feedback session is invalid.", 400, fields)
    touched = {objects[e["object_id"]] for k in ("injections", "signals") for e in data[k]}
    return core.resolve_ts(data.get("ts"), [obj.last_op_ts for obj in touched])


def _apply(
    client: ApiClient,
    item: Item,
    ts: datetime,
    objects: dict,
    keys: dict,
    namespaces: dict,
    tallies: core.TallyStore,
    store: AggregateStore,
    writes: Writes,
) -> dict:
    data = item.data
    session_pk = uuid.uuid4()
    request_id = data["request_id"]
    session_id = data["session_id"]
    system = core.Actor.of(client)
    session_text = str(session_pk)
    extra = {"request_id": request_id, "feedback_session_id": session_text}
    session = SessionRow(
        id=session_pk,
        client_id=client.pk,
        request_id=request_id,
        body_hash=item.body_hash,
        session_id=session_id,
        ts=ts,
        namespace_scope=list(data["namespace_scope"]),
        context_budget=data["context_budget"],
        tokens_used=data["tokens_used"],
        context_text=data.get("context_text") or "",
        context_tags=list(data.get("context_tags") or []),
        outcome=data.get("outcome"),
        record=None,
        head_hash=GENESIS_HASH,
        last_op_ts=ts,
    )
    session_json = oplog.json_scalar(session_text)

    injected: dict = {}
    str_values: list[float] = []
    for inj in data["injections"]:
        obj = objects[inj["object_id"]]
        composite = inj.get("composite_score")
        str_value = inj.get("str_value")
        if str_value is None and composite is not None:
            str_value = composite / inj["token_cost"]
        if str_value is not None:
            str_values.append(str_value)
        payload = {
            "session_id": session_id,
            "request_id": request_id,
            "feedback_session_id": session_text,
            "object_id": keys[obj.pk].text,
            "rank_position": inj.get("rank_position"),
            "representation_type": inj.get("representation_type") or "",
            "token_cost": inj["token_cost"],
            "composite_score": composite,
            "str_value": str_value,
            "injection_ts": iso(ts),
        }
        writes.ops.append(
            oplog.injection_event(
                obj,
                ts=ts,
                payload=payload,
                actor_id=system.id,
                actor_type=system.type,
                payload_json=injection_payload_json(payload),
                key=keys[obj.pk],
            )
        )
        aggregates.on_injection(store.get(obj.pk), inj["token_cost"])
        row = new_row(
            InjectionEvent,
            id=None,
            session_id=session_pk,
            object_id=obj.pk,
            namespace_id=obj.namespace_id,
            ts=ts,
            rank_position=inj.get("rank_position"),
            representation_type=payload["representation_type"],
            token_cost=inj["token_cost"],
            composite_score=composite,
            str_value=str_value,
            ended_unused=False,
        )
        writes.injections.append(row)
        injected[obj.pk] = row
        writes.touched[obj.pk] = obj

    received: dict = defaultdict(list)
    out_signals: list[dict] = []

    def apply(
        obj: MemoryObject,
        signal: policy.Signal,
        automatic: bool,
        more: dict | None = None,
        payload_json: str | None = None,
    ) -> core.SignalResult:
        result = core.signal_ops(
            obj,
            signal,
            tallies,
            extra={**extra, **(more or {})},
            payload_json=payload_json,
            key=keys[obj.pk],
        )
        writes.ops.append(result.feedback_op)
        if result.change_op is not None:
            writes.ops.append(result.change_op)
        base, effective = core.weights_of(result.outcome, signal)
        aggregates.on_signal(store.get(obj.pk), signal.signal_type, result.effect, effective, ts)
        if not automatic:
            # Automatic UNUSED stay in the log (FEEDBACK_EVENT) and in InjectionEvent.ended_unused;
            # SignalRecord keeps what clients sent, a quarter of the rows.
            writes.signals.append(signal_record_row(obj, result, session=session))
        received[obj.pk].append(signal.signal_type)
        writes.touched[obj.pk] = obj
        return result

    for entry in data["signals"]:
        obj = objects[entry["object_id"]]
        actor = core.Actor.of(client, entry.get("actor_id"), entry.get("actor_type"))
        signal = policy.Signal(
            signal_type=entry["signal_type"],
            detection_method=policy.resolve_detection_method(
                entry["signal_type"], entry.get("detection_method")
            ),
            actor_id=actor.id,
            actor_type=actor.type,
            session_id=session_id,
            ts=ts,
            evidence_ids=tuple(entry.get("evidence_ids") or ()),
        )
        out_signals.append(signal_out(keys[obj.pk].text, apply(obj, signal, automatic=False)))

    text = {pk: keys[pk].text for pk in injected}
    unused_ids = [text[pk] for pk in injected if received[pk] == ["UNUSED"]]
    silent = [pk for pk in injected if not received[pk]]
    detected = {}
    if data.get("detect") and silent:
        # Only objects without an explicit signal are analysed: an explicit signal is never
        # replaced or doubled by an inferred one (RFC-0009 §4).
        found = detection.analyse(
            data["response_text"],
            [detection.DetectionInput(text[pk], objects[pk].content) for pk in silent],
            embedding.service_scorer(),
        )
        detected = {d.object_id: d for d in found}
    unused_json = None  # every plain automatic UNUSED of the session has the same payload
    for pk in silent:
        found_one = detected.get(text[pk])
        more = None
        if found_one is not None:
            more = {
                "detected": True,
                "detection_score": found_one.score,
                "detection_reason": found_one.reason,
            }
        referenced = found_one is not None and found_one.signal_type == detection.REFERENCED
        signal = policy.Signal(
            signal_type="REFERENCED" if referenced else "UNUSED",
            detection_method=DETECTED_METHOD if found_one is not None else AUTO_UNUSED_METHOD,
            actor_id=system.id,
            actor_type=system.type,
            session_id=session_id,
            ts=ts,
        )
        plain = found_one is None
        result = apply(
            objects[pk],
            signal,
            automatic=True,
            more=more,
            payload_json=unused_json if plain else None,
        )
        if plain:
            unused_json = result.feedback_op.payload_json
        if referenced:
            out_signals.append(
                {**signal_out(text[pk], result), "detected": True, "score": found_one.score}
            )
        else:
            unused_ids.append(text[pk])

    outcome = data.get("outcome")
    for pk, row in injected.items():
        types = received[pk]
        row.ended_unused = all(t == "UNUSED" for t in types)
        aggregates.on_session_end(store.get(pk), signal_types=types, outcome=outcome, ts=ts)
        if row.ended_unused:  # on_session_end grew the streak
            writes.streak_grew.add(pk)

    has_corrected = any(s["signal_type"] == "CORRECTED" for s in data["signals"])
    record = {
        "id": session_text,
        "session_id": session_id,
        "request_id": request_id,
        "ts": iso(ts),
        "namespace_scope": session.namespace_scope,
        "context_budget": session.context_budget,
        "tokens_used": session.tokens_used,
        "context_tags": session.context_tags,
        "outcome": outcome,
        "injected_object_ids": [text[pk] for pk in injected],
        "signals": out_signals,
        "unused_ids": unused_ids,
        "session_str_mean": fmean(str_values) if str_values else None,
    }
    session.record = record
    session.record_json = item.record_json = json.dumps(
        record, separators=(",", ":"), allow_nan=False
    )
    payload = {k: v for k, v in record.items() if k not in ("id", "ts")}
    payload["context_text"] = session.context_text
    writes.ops.append(
        oplog.append(
            session,
            target_type=oplog.TARGET_SESSION,
            namespace=session.namespace_scope[0],
            op_type="FEEDBACK_SESSION",
            ts=ts,
            payload=payload,
            actor_id=system.id,
            actor_type=system.type,
            session_id=session_id,
            policy_version=policy.POLICY_VERSION,
            target_json=session_json,
        )
    )
    writes.sessions.append(session)
    for name in session.namespace_scope:
        writes.scopes.append(
            new_row(
                SessionNamespace,
                id=None,
                session_id=session_pk,
                namespace_id=namespaces[name].pk,
                ts=ts,
                context_budget=session.context_budget,
                has_corrected=has_corrected,
            )
        )
    return record


def injection_payload_json(payload: dict) -> str:
    """``canonical_json`` of an INJECTION_EVENT payload, spelled out in sorted-key order (half
    the encoder's cost; five thousand a batch). ``test_ingest`` checks the two agree."""
    j = oplog.json_scalar
    return (
        f'{{"composite_score":{j(payload["composite_score"])},'
        f'"feedback_session_id":{j(payload["feedback_session_id"])},'
        f'"injection_ts":{j(payload["injection_ts"])},"object_id":{j(payload["object_id"])},'
        f'"rank_position":{j(payload["rank_position"])},'
        f'"representation_type":{j(payload["representation_type"])},'
        f'"request_id":{j(payload["request_id"])},"session_id":{j(payload["session_id"])},'
        f'"str_value":{j(payload["str_value"])},"token_cost":{j(payload["token_cost"])}}}'
    )


def signal_out(object_id: str, result: core.SignalResult) -> dict:
    """A signal as the session record lists it (API.md)."""
    signal, payload = result.signal, result.feedback_op.payload
    out = {
        "signal_type": signal.signal_type,
        "object_id": object_id,
        "detection_method": signal.detection_method,
        "reliability_class": payload["reliability_class"],
        "effect": result.effect,
        "operation_id": str(result.operation.id),
    }
    kind = policy.SIGNALS[signal.signal_type].kind
    if kind == policy.POSITIVE:
        out["applied_gamma"] = payload["base_weight"]
        out["effective_gamma"] = payload["effective_weight"]
    elif kind == policy.NEGATIVE:
        out["applied_delta"] = payload["base_weight"]
        out["effective_delta"] = payload["effective_weight"]
    if result.outcome.reason:
        out["reason"] = result.outcome.reason
    return out


def _flush(writes: Writes, tallies: core.TallyStore, store: AggregateStore) -> None:
    if not writes.built:
        return
    writes.send()
    bulk.update(MemoryObject, list(writes.touched.values()), OBJECT_FIELDS)
    tallies.flush()
    store.flush()


def record_one(*, client: ApiClient, data: dict, body_hash: str) -> tuple[int, dict]:
    """The single endpoint: a batch of one."""
    return record_sessions(client=client, items=[Item(data, body_hash)])[0]
