"""The feedback-session planner (SPEC §7–§9): loaded state and validated bodies in, rows out.

Pure: no database access. ``feedback.ingest`` loads the state through ``rms.store`` (under the
objects' locks), hands it here with the bodies, and writes what comes out. For each body, in
order, the planner decides its answer: the stored record of an earlier request with the same
``request_id`` (or 409 for another body, ``rms.idempotency``), the answer of an earlier item of
the same call with that key, a refusal (each session is checked in full before anything of it
is planned, so a bad session leaves nothing behind while the others go ahead), or 201 with its
record. A planned session yields its rows: the operations of every chain it extends (in chain
order, so ``seq`` follows each chain), its injection and signal rows, its session row and
scopes; and it moves, in memory, the objects, their session tallies and aggregates, listed by
``SessionPlan.changes`` for the service to write once at the end.

This is where the session rules are read: the scope and visibility checks, an object injected
once per session, at most one UNUSED per object, clients never sending the sweep's signals
(``rms.services.validate_client_signal``), the automatic UNUSED of an injected object that got
no signal and the signals of the optional response analysis (RFC-0009 §4; the analysis itself
runs before the transaction, in ``feedback.ingest``), the session record (API.md).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from statistics import fmean

from analysis import api as detection
from feedback import aggregates
from feedback.apply import apply_signal
from feedback.models import InjectionEvent, SessionNamespace, SignalRecord
from rms import idempotency, oplog, policy
from rms import services as core
from rms.errors import DomainError
from rms.models import GENESIS_HASH, ApiClient, MemoryObject, new_row
from rms.replay import iso

AUTO_UNUSED_METHOD = "injection_tracking"  # the service's own deterministic injection tracking
DETECTED_METHOD = "response_analysis"  # LOW reliability, 0.5 discount (SPEC §2)

#: An item's answer: (201, record) created, (200, record) replayed, (status, DomainError) refused.
Answer = tuple[int, "dict | DomainError"]


@dataclass
class Item:
    """One session body: validated ``data`` (or the ``error`` that refused it) and the hash of
    the body as sent (SPEC §7)."""

    data: dict | None
    body_hash: str
    error: DomainError | None = None
    result: Answer | None = None
    duplicate_of: Item | None = None
    #: The JSON text of ``result``'s record when this call created it: encoded once, for the
    #: stored row and for the batch answer (``feedback.api.views.batch_answer``).
    record_json: str | None = None
    #: The response analysis of a ``detect`` session, by object id: run by ``feedback.ingest``
    #: before its transaction opens (RFC-0009 §4), read here.
    detected: dict | None = None


def refused(exc: DomainError) -> Answer:
    return exc.status, exc


@dataclass(frozen=True)
class SessionSignal:
    """One signal a session applies: the client's own (``entry``), or the service's for an
    injected object the client sent nothing for — REFERENCED when the analyser found it used
    (``detection``), else UNUSED."""

    object_id: uuid.UUID
    signal_type: str
    entry: dict | None = None
    detection: detection.Detection | None = None


def silent_injections(data: dict) -> list:
    """The injected objects without an explicit signal, in injection order: the ones response
    analysis looks at. An explicit signal is never replaced or doubled by an inferred one
    (RFC-0009 §4)."""
    explicit = {e["object_id"] for e in data["signals"]}
    injected = dict.fromkeys(inj["object_id"] for inj in data["injections"])
    return [oid for oid in injected if oid not in explicit]


def session_signals(data: dict, detected: dict | None) -> list[SessionSignal]:
    """Every signal a session applies, in the order it applies them: the client's, then one
    per silent injected object. The planner applies exactly this list, and the tallies loaded
    before planning are those of its pairs (:func:`tally_pairs`)."""
    out = [SessionSignal(e["object_id"], e["signal_type"], entry=e) for e in data["signals"]]
    for oid in silent_injections(data):
        found = (detected or {}).get(oid)
        referenced = found is not None and found.signal_type == detection.REFERENCED
        out.append(
            SessionSignal(oid, policy.REFERENCED if referenced else policy.UNUSED, detection=found)
        )
    return out


def tally_pairs(items: list[Item]) -> set[tuple]:
    """The (object id, session_id) pairs whose session tally the items' signals read or move."""
    return {
        (signal.object_id, item.data["session_id"])
        for item in items
        for signal in session_signals(item.data, item.detected)
        if policy.uses_tally(signal.signal_type)
    }


@dataclass(eq=False)
class SessionRow:
    """A ``FeedbackSession`` row as built (its columns). Its record is not stored: it is the
    FEEDBACK_SESSION payload's (``feedback.session_record``)."""

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
    stored_record: dict | None
    head_hash: str
    last_op_ts: datetime

    @property
    def pk(self) -> uuid.UUID:  # a chain target (``rms.oplog.ChainTarget``)
        return self.id


@dataclass
class Loaded:
    """What a call reads before it plans (``feedback.ingest``): the stored sessions of its
    request ids, the namespaces of its scopes by name, the objects it touches (locked) by id,
    their aggregates and session tallies, and the ids of the namespaces the client may see
    (None: all of them)."""

    stored: dict
    namespaces: dict
    objects: dict
    aggregates: aggregates.Ledger
    tallies: policy.TallyLedger
    visible: frozenset | None


@dataclass
class Changes:
    """What a plan moved beyond its event rows: the objects to update, their session tallies
    and their aggregates (``feedback.ingest`` writes them once, at the end of the call)."""

    objects: list[MemoryObject]
    tallies: policy.TallyChanges
    aggregates: aggregates.AggregateChanges


@dataclass
class Events:
    """The event rows of planned sessions, in the order they are written."""

    ops: list[oplog.OpRow] = field(default_factory=list)
    injections: list[InjectionEvent] = field(default_factory=list)
    signals: list[SignalRecord] = field(default_factory=list)
    sessions: list[SessionRow] = field(default_factory=list)
    scopes: list[SessionNamespace] = field(default_factory=list)


@dataclass(eq=False)
class SessionWork:
    """One session while it is planned: its body, its row, the payload fields every signal
    operation of it carries, its injection rows by object id, the signal types each object
    received, and what its record lists."""

    item: Item
    row: SessionRow
    extra: dict
    injected: dict = field(default_factory=dict)
    str_values: list[float] = field(default_factory=list)
    received: defaultdict = field(default_factory=lambda: defaultdict(list))
    #: The signal types the session will apply, by object id as sent (the ranking event's input).
    planned_types: defaultdict = field(default_factory=lambda: defaultdict(list))
    #: Each injected object's (utility, uses, last_use_at) once the session closes, by object
    #: id: computed once for its INJECTION_EVENT, stored by its session end.
    ranking: dict = field(default_factory=dict)
    signals_out: list[dict] = field(default_factory=list)
    unused_ids: list[str] = field(default_factory=list)
    #: The payload JSON of the session's plain automatic UNUSED, once one is planned.
    unused_json: str | None = None


class SessionPlan:
    """The plan of one call. :meth:`sessions` plans the items and yields their event rows;
    afterwards :meth:`changes` lists the objects, tallies and aggregates moved, ``streak_grew``
    the injected objects whose unused streak grew (the sweep trigger, SPEC §9) and ``planned``
    the number of sessions created."""

    def __init__(self, client: ApiClient, loaded: Loaded) -> None:
        self.client = client
        self.loaded = loaded
        self.system = core.Actor.of(client)
        names = {ns.pk: ns.name for ns in loaded.namespaces.values()}
        # Only objects of the call's scopes are ever planned on (``_check``).
        self.keys = {
            pk: oplog.ChainKey.of(obj, names[obj.namespace_id])
            for pk, obj in loaded.objects.items()
            if obj.namespace_id in names
        }
        self.touched: dict = {}
        self.streak_grew: set = set()
        self.planned = 0
        self._events = Events()

    def sessions(self, items: list[Item], every: int | None = None) -> Iterator[Events]:
        """Answer every item (``item.result``); yields the event rows planned, every ``every``
        created sessions when given, and the rest at the end."""
        first: dict[str, Item] = {}
        todo: list[Item] = []
        for item in items:
            request_id = item.data["request_id"]
            previous = self.loaded.stored.get(request_id)
            if previous is not None:
                try:
                    first_answer = idempotency.replay(
                        request_id, previous.body_hash, item.body_hash, previous.record
                    )
                    item.result = (200, first_answer)
                except DomainError as exc:
                    item.result = refused(exc)
            elif request_id in first:
                item.duplicate_of = first[request_id]
            else:
                first[request_id] = item
                todo.append(item)

        for item in todo:
            try:
                ts = self._check(item.data)
            except DomainError as exc:
                item.result = refused(exc)
                continue
            item.result = (201, self._plan(item, ts))
            self.planned += 1
            if every and self.planned % every == 0:
                yield self._take()
        yield self._take()

        for item in items:
            original = item.duplicate_of
            if original is None:
                continue
            if original.body_hash != item.body_hash:
                item.result = refused(idempotency.conflict(item.data["request_id"]))
            elif original.result[0] == 201:
                item.result = (200, original.result[1])
                item.record_json = original.record_json
            else:
                item.result = original.result

    def changes(self) -> Changes:
        """The objects, tallies and aggregates moved by the sessions planned so far."""
        return Changes(
            objects=list(self.touched.values()),
            tallies=self.loaded.tallies.changes(),
            aggregates=self.loaded.aggregates.changes(),
        )

    def _take(self) -> Events:
        events, self._events = self._events, Events()
        return events

    def _check(self, data: dict) -> datetime:
        """Everything that can refuse a session, before any of it is planned; returns its ts."""
        namespaces, objects, visible = (
            self.loaded.namespaces,
            self.loaded.objects,
            self.loaded.visible,
        )
        scope = data["namespace_scope"]
        for name in scope:
            ns = namespaces.get(name)
            if visible is not None and (ns is None or ns.pk not in visible):
                raise DomainError("forbidden", f"You may not write to namespace {name!r}.", 403)
            if ns is None:
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
                        core.validate_client_signal(
                            entry["signal_type"], entry.get("detection_method")
                        )
                    except DomainError as exc:
                        for name, messages in (exc.fields or {}).items():
                            fields[f"signals.{i}.{name}"] = messages
                    if entry["signal_type"] == policy.UNUSED:
                        if entry["object_id"] in unused_seen:
                            fields[f"signals.{i}.signal_type"] = ["At most one UNUSED per object."]
                        unused_seen.add(entry["object_id"])
        if fields:
            raise DomainError("validation_error", "The feedback session is invalid.", 400, fields)
        touched = {objects[e["object_id"]] for k in ("injections", "signals") for e in data[k]}
        return core.resolve_ts(data.get("ts"), [obj.last_op_ts for obj in touched])

    def _plan(self, item: Item, ts: datetime) -> dict:
        """Plan one checked session in the order SPEC §7 processes it; returns its record."""
        work = self._open_session(item, ts)
        planned = session_signals(item.data, item.detected)
        for signal in planned:
            work.planned_types[signal.object_id].append(signal.signal_type)
        for inj in item.data["injections"]:
            self._inject(work, inj)
        for signal in planned:
            if signal.entry is not None:
                self._apply_client_signal(work, signal.entry)
        work.unused_ids = [
            self.keys[pk].text for pk in work.injected if work.received[pk] == [policy.UNUSED]
        ]
        for signal in planned:
            if signal.entry is None:
                self._apply_silent_signal(work, signal)
        self._end_injections(work)
        record = self._session_record(work)
        self._close_session(work, record)
        return record

    def _open_session(self, item: Item, ts: datetime) -> SessionWork:
        """SPEC §7: the session row (its columns as sent, defaults filled in) and the fields
        every operation of the session carries."""
        data = item.data
        session_pk = uuid.uuid4()
        row = SessionRow(
            id=session_pk,
            client_id=self.client.pk,
            request_id=data["request_id"],
            body_hash=item.body_hash,
            session_id=data["session_id"],
            ts=ts,
            namespace_scope=list(data["namespace_scope"]),
            context_budget=data["context_budget"],
            tokens_used=data["tokens_used"],
            context_text=data.get("context_text") or "",
            context_tags=list(data.get("context_tags") or []),
            outcome=data.get("outcome"),
            stored_record=None,
            head_hash=GENESIS_HASH,
            last_op_ts=ts,
        )
        extra = {"request_id": row.request_id, "feedback_session_id": str(session_pk)}
        return SessionWork(item=item, row=row, extra=extra)

    def _inject(self, work: SessionWork, inj: dict) -> None:
        """SPEC §6–§7: one injection is an INJECTION_EVENT on the object's chain (``str_value``
        = composite_score / token_cost when not given) and an injection row; SPEC §8: it
        counts in the object's injections and token cost."""
        row, ts = work.row, work.row.ts
        obj = self.loaded.objects[inj["object_id"]]
        key = self.keys[obj.pk]
        composite = inj.get("composite_score")
        str_value = inj.get("str_value")
        if str_value is None and composite is not None:
            str_value = composite / inj["token_cost"]
        if str_value is not None:
            work.str_values.append(str_value)
        agg = self.loaded.aggregates.get(obj.pk)
        # The object's ranking inputs once the session closes (the ranking event, rms.events):
        # the session's own signals decide them, so they are known before the chain is written.
        ranking = work.ranking[obj.pk] = aggregates.ranking_after_session(
            agg, signal_types=work.planned_types[inj["object_id"]], outcome=row.outcome, ts=ts
        )
        utility, uses, last_use_at = ranking
        payload = {
            "session_id": row.session_id,
            "request_id": row.request_id,
            "feedback_session_id": work.extra["feedback_session_id"],
            "object_id": key.text,
            "rank_position": inj.get("rank_position"),
            "representation_type": inj.get("representation_type") or "",
            "token_cost": inj["token_cost"],
            "composite_score": composite,
            "str_value": str_value,
            "injection_ts": iso(ts),
            "utility": utility,
            "uses": uses,
            "last_use_at": iso(last_use_at),
            # The version the INJECTION_EVENT gives the object (``oplog`` bumps it by one).
            "version": obj.version + 1,
        }
        self._events.ops.append(
            oplog.injection_event(
                obj,
                ts=ts,
                payload=payload,
                actor_id=self.system.id,
                actor_type=self.system.type,
                payload_json=injection_payload_json(payload),
                key=key,
            )
        )
        aggregates.on_injection(agg, inj["token_cost"])
        injection = new_row(  # not Model.__init__: ten per session of a batch
            InjectionEvent,
            id=None,
            session_id=row.id,
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
        self._events.injections.append(injection)
        work.injected[obj.pk] = injection
        self.touched[obj.pk] = obj

    def _apply_client_signal(self, work: SessionWork, entry: dict) -> None:
        """SPEC §2, §7: a client's signal, in list order, with its actor (the client itself
        when not given) and its type's primary detection method when none is sent."""
        obj = self.loaded.objects[entry["object_id"]]
        actor = core.Actor.of(self.client, entry.get("actor_id"), entry.get("actor_type"))
        signal = policy.Signal(
            signal_type=entry["signal_type"],
            detection_method=policy.resolve_detection_method(
                entry["signal_type"], entry.get("detection_method")
            ),
            actor_id=actor.id,
            actor_type=actor.type,
            session_id=work.row.session_id,
            ts=work.row.ts,
            evidence_ids=tuple(entry.get("evidence_ids") or ()),
        )
        result = self._apply(work, obj, signal, record=True)
        work.signals_out.append(signal_out(self.keys[obj.pk].text, result))

    def _apply_silent_signal(self, work: SessionWork, silent: SessionSignal) -> None:
        """SPEC §5, §7 and RFC-0009 §4: an injected object the client sent nothing for gets
        the service's signal: REFERENCED when the response analysis found it used (LOW, 0.5
        discount), else UNUSED (by the analysis, or by injection tracking without one). The
        record lists a REFERENCED with its score and an UNUSED in ``unused_ids``. Automatic
        signals stay in the log (FEEDBACK_EVENT) and in ``InjectionEvent.ended_unused``;
        ``SignalRecord`` keeps what clients sent, a quarter of the rows."""
        pk, found = silent.object_id, silent.detection
        signal = policy.Signal(
            signal_type=silent.signal_type,
            detection_method=DETECTED_METHOD if found is not None else AUTO_UNUSED_METHOD,
            actor_id=self.system.id,
            actor_type=self.system.type,
            session_id=work.row.session_id,
            ts=work.row.ts,
        )
        obj, text = self.loaded.objects[pk], self.keys[pk].text
        if found is None:
            # Every plain automatic UNUSED of a session carries the same payload: encoded once.
            result = self._apply(work, obj, signal, record=False, payload_json=work.unused_json)
            work.unused_json = result.feedback_op.payload_json
        else:
            more = {
                "detected": True,
                "detection_score": found.score,
                "detection_reason": found.reason,
            }
            result = self._apply(work, obj, signal, record=False, more=more)
        if silent.signal_type == policy.REFERENCED:
            work.signals_out.append(
                {**signal_out(text, result), "detected": True, "score": found.score}
            )
        else:
            work.unused_ids.append(text)

    def _apply(
        self,
        work: SessionWork,
        obj: MemoryObject,
        signal: policy.Signal,
        *,
        record: bool,
        more: dict | None = None,
        payload_json: str | None = None,
    ) -> core.SignalResult:
        """One signal of the session through ``feedback.apply``, its rows planned and the
        signal type noted for the object's session end."""
        applied = apply_signal(
            obj,
            signal,
            tallies=self.loaded.tallies,
            ledger=self.loaded.aggregates,
            extra={**work.extra, **(more or {})},
            payload_json=payload_json,
            key=self.keys[obj.pk],
            record=record,
            session=work.row,
        )
        self._events.ops.extend(applied.ops)
        if applied.record is not None:
            self._events.signals.append(applied.record)
        work.received[obj.pk].append(signal.signal_type)
        self.touched[obj.pk] = obj
        return applied.result

    def _end_injections(self, work: SessionWork) -> None:
        """SPEC §8: each injected object closes the session in its aggregate; one that got
        only UNUSED ends unused and its streak grows (the sweep trigger, SPEC §9). Its
        utility, uses and last use are those its INJECTION_EVENT carries (``_inject``): the
        signals it received are the ones planned (``session_signals``, applied in that order),
        and no signal moves them, so the same inputs give the same values, computed once."""
        outcome, ts = work.row.outcome, work.row.ts
        for pk, injection in work.injected.items():
            types = work.received[pk]
            injection.ended_unused = all(t == policy.UNUSED for t in types)
            aggregates.on_session_end(
                self.loaded.aggregates.get(pk),
                signal_types=types,
                outcome=outcome,
                ts=ts,
                ranking=work.ranking[pk],
            )
            if injection.ended_unused:
                self.streak_grew.add(pk)

    def _session_record(self, work: SessionWork) -> dict:
        """The session record (API.md), encoded once for the answer; the row does not store it
        (its FEEDBACK_SESSION payload holds the same, ``feedback.session_record``)."""
        row = work.row
        record = {
            "id": str(row.id),
            "session_id": row.session_id,
            "request_id": row.request_id,
            "ts": iso(row.ts),
            "namespace_scope": row.namespace_scope,
            "context_budget": row.context_budget,
            "tokens_used": row.tokens_used,
            "context_tags": row.context_tags,
            "outcome": row.outcome,
            "injected_object_ids": [self.keys[pk].text for pk in work.injected],
            "signals": work.signals_out,
            "unused_ids": work.unused_ids,
            "session_str_mean": fmean(work.str_values) if work.str_values else None,
        }
        work.item.record_json = json.dumps(record, separators=(",", ":"), allow_nan=False)
        return record

    def _close_session(self, work: SessionWork, record: dict) -> None:
        """SPEC §6–§7: the FEEDBACK_SESSION operation on the session's own chain, then the
        session row and one scope row per namespace of ``namespace_scope``."""
        row, ts = work.row, work.row.ts
        payload = {k: v for k, v in record.items() if k not in ("id", "ts")}
        payload["context_text"] = row.context_text
        self._events.ops.append(
            oplog.append(
                row,
                target_type=oplog.TARGET_SESSION,
                namespace=row.namespace_scope[0],
                op_type="FEEDBACK_SESSION",
                ts=ts,
                payload=payload,
                actor_id=self.system.id,
                actor_type=self.system.type,
                session_id=row.session_id,
                policy_version=policy.POLICY_VERSION,
                target_json=oplog.json_scalar(record["id"]),
            )
        )
        self._events.sessions.append(row)
        has_corrected = any(s["signal_type"] == policy.CORRECTED for s in work.item.data["signals"])
        for name in row.namespace_scope:
            self._events.scopes.append(
                new_row(
                    SessionNamespace,
                    id=None,
                    session_id=row.id,
                    namespace_id=self.loaded.namespaces[name].pk,
                    ts=ts,
                    context_budget=row.context_budget,
                    has_corrected=has_corrected,
                )
            )


def injection_payload_json(payload: dict) -> str:
    """``canonical_json`` of an INJECTION_EVENT payload, spelled out in sorted-key order (half
    the encoder's cost; five thousand a batch). ``test_ingest_payloads`` checks the two agree."""
    j = oplog.json_scalar
    return (
        f'{{"composite_score":{j(payload["composite_score"])},'
        f'"feedback_session_id":{j(payload["feedback_session_id"])},'
        f'"injection_ts":{j(payload["injection_ts"])},"last_use_at":{j(payload["last_use_at"])},'
        f'"object_id":{j(payload["object_id"])},"rank_position":{j(payload["rank_position"])},'
        f'"representation_type":{j(payload["representation_type"])},'
        f'"request_id":{j(payload["request_id"])},"session_id":{j(payload["session_id"])},'
        f'"str_value":{j(payload["str_value"])},"token_cost":{j(payload["token_cost"])},'
        f'"uses":{j(payload["uses"])},"utility":{j(payload["utility"])},'
        f'"version":{j(payload["version"])}}}'
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
