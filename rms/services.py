"""Core write services (STYLE §2): each is one transaction that changes objects and appends the
operations that record the change (SPEC §6).

Locks: every write locks the objects it touches once, in primary-key order (``rms.store``), and
holds no lock across network calls. Retries: none of these functions retries on its own; each
either commits entirely or raises and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from rms import oplog, policy, store
from rms.errors import DomainError, Forbidden, NotFound
from rms.models import ApiClient, MemoryObject, Namespace, Operation, SessionTally, new_row

DEFAULT_ACTOR_TYPE = "SYSTEM_PROCESS"


@dataclass(frozen=True)
class Actor:
    id: str
    type: str = DEFAULT_ACTOR_TYPE

    @classmethod
    def of(cls, client: ApiClient, actor_id: str | None = None, actor_type: str | None = None):
        """Without actor_id/actor_type the actor is the API client itself (SPEC §1)."""
        return cls(actor_id or client.name, actor_type or DEFAULT_ACTOR_TYPE)


# --- time (SPEC §6) -------------------------------------------------------------------------------


def visible_object_map(client: ApiClient, ids: Iterable, *, namespace=None) -> dict:
    """{id: object} of the objects with these ids the client may see (and in ``namespace``
    when given), with their namespaces, in one query. Ids not in the answer are unknown to the
    client, whether they do not exist or are out of its reach."""
    qs = MemoryObject.objects.select_related("namespace").filter(pk__in=list(ids))
    if namespace is not None:
        qs = qs.filter(namespace=namespace)
    return {o.pk: o for o in qs if client.can_see(o.namespace.name)}


def visible_objects(client: ApiClient, ids: list, field: str, *, namespace=None) -> dict:
    """:func:`visible_object_map`, or 400 ``unknown_object`` naming (up to 20 of) the missing ids
    under ``field``."""
    found = visible_object_map(client, ids, namespace=namespace)
    missing = [str(i) for i in ids if i not in found]
    if missing:
        message = (
            "Some objects are unknown."
            if namespace is None
            else "Some objects do not exist in this namespace."
        )
        raise DomainError(
            "unknown_object",
            message,
            400,
            {field: [f"Unknown object {i}." for i in missing[:20]]},
        )
    return found


def check_not_future(ts: datetime | None, field: str = "ts") -> None:
    if ts is not None and ts > timezone.now():
        raise DomainError(
            "ts_in_future",
            "ts may not be in the future.",
            400,
            {field: ["Must not be in the future."]},
        )


def resolve_ts(requested: datetime | None, latest: Iterable[datetime]) -> datetime:
    """The event time of a write on chains whose latest operations are at ``latest``.

    Called under the locks, so ``latest`` cannot move while we decide.
    """
    latest_ts = max(latest, default=None)
    current = timezone.now()
    if requested is None:
        return current if latest_ts is None or current >= latest_ts else latest_ts
    check_not_future(requested)
    if latest_ts is not None and requested < latest_ts:
        raise DomainError(
            "ts_out_of_order",
            f"ts {requested.isoformat()} is earlier than the latest operation "
            f"({latest_ts.isoformat()}) on an object this write touches.",
            409,
        )
    return requested


# --- namespaces -----------------------------------------------------------------------------------


def namespace_create(
    *,
    name: str,
    ignore_threshold: int | None = None,
    relevance_threshold: float | None = None,
    alert_thresholds: dict | None = None,
    weights: dict | None = None,
    retrieval: dict | None = None,
) -> Namespace:
    ns = Namespace(name=name)
    if ignore_threshold is not None:
        ns.ignore_threshold = ignore_threshold
    if relevance_threshold is not None:
        ns.relevance_threshold = relevance_threshold
    ns.alert_thresholds = alert_thresholds or {}
    ns.weights = weights or {}
    ns.retrieval = retrieval or {}
    try:
        with transaction.atomic():
            ns.save()
    except IntegrityError as exc:
        raise DomainError("namespace_exists", f"Namespace {name!r} already exists.", 409) from exc
    return ns


def namespace_for_write(client: ApiClient, name: str) -> Namespace:
    if not client.can_see(name):
        raise Forbidden(f"You may not write to namespace {name!r}.")
    try:
        return Namespace.objects.get(name=name)
    except Namespace.DoesNotExist as exc:
        raise DomainError(
            "unknown_namespace",
            f"Namespace {name!r} does not exist.",
            400,
            {"namespace": ["Unknown namespace."]},
        ) from exc


# --- objects --------------------------------------------------------------------------------------


def object_create(*, client: ApiClient, items: list[dict]) -> list[MemoryObject]:
    """Create objects (one or many) with their OBJECT_CREATED operations, all or nothing.

    ``items`` are validated field values (see the API's input serializer). A client-supplied id
    that exists already is 409; policy limits (ceilings) are 400 with the item's index.
    """
    admin = client.role == ApiClient.ROLE_ADMIN
    many = len(items) > 1
    namespaces: dict[str, Namespace] = {}
    for name in {item["namespace"] for item in items}:
        namespaces[name] = namespace_for_write(client, name)

    now = timezone.now()
    errors: dict[str, list[str]] = {}
    objects: list[MemoryObject] = []
    ops: list[Operation] = []
    seen: set = set()
    for index, item in enumerate(items):
        prefix = f"{index}." if many else ""
        try:
            state = policy.initial_state(
                epistemic_type=item["epistemic_type"],
                confidence=item.get("confidence"),
                decay_profile=item.get("decay_profile"),
                salience_base=item.get("salience_base"),
                condition_state=item.get("condition_state"),
                evidence_ids=item.get("evidence_ids") or (),
                admin=admin,
            )
        except policy.PolicyError as exc:
            errors[prefix + (exc.field or "non_field_errors")] = [exc.message]
            continue
        ts = item.get("ts")
        if ts is not None and ts > now:
            errors[prefix + "ts"] = ["Must not be in the future."]
            continue
        created = ts or now
        object_id = item.get("id") or uuid.uuid4()
        if object_id in seen:
            errors[prefix + "id"] = ["Duplicate id in this request."]
            continue
        seen.add(object_id)
        actor = Actor.of(client, item.get("actor_id"), item.get("actor_type"))
        obj = MemoryObject(
            id=object_id,
            namespace=namespaces[item["namespace"]],
            content=item["content"],
            domain_tags=sorted(set(item.get("domain_tags") or [])),
            created_by=actor.id,
            created_by_type=actor.type,
            created_at=created,
            last_op_ts=created,
        )
        obj.apply_state(state)
        ops.append(oplog.object_created(obj, ts=created, actor_id=actor.id, actor_type=actor.type))
        objects.append(obj)
    if errors:
        raise DomainError("validation_error", "Some objects are invalid.", 400, errors)

    try:
        with transaction.atomic():
            if MemoryObject.objects.filter(pk__in=seen).exists():
                raise DomainError("object_exists", "An object with this id already exists.", 409)
            MemoryObject.objects.bulk_create(objects)
            store.get().insert(Operation, ops)
    except IntegrityError as exc:  # a concurrent create with the same id won the race
        raise DomainError("object_exists", "An object with this id already exists.", 409) from exc
    return objects


def visible_object(client: ApiClient, object_id, *, lock: bool = False) -> MemoryObject:
    """The object by id, 404 if it does not exist or the caller cannot see its namespace."""
    if lock:
        obj = store.get().lock_objects([object_id]).get(object_id)
    else:
        obj = MemoryObject.objects.select_related("namespace").filter(pk=object_id).first()
    if obj is None or not client.can_see(obj.namespace.name):
        raise NotFound("No such object.")
    return obj


def _admin_change(
    *,
    client: ApiClient,
    object_id,
    op_type: str,
    change: Callable[[policy.ObjectState], policy.ObjectState],
    payload: Callable[[policy.ObjectState], dict],
    actor: Actor,
    ts: datetime | None,
) -> MemoryObject:
    """Lock one object, apply ``change`` and append its operation; ``payload`` reads the state
    before the change (taken under the lock, so "from" values are the ones really replaced)."""
    with transaction.atomic():
        obj = visible_object(client, object_id, lock=True)
        at = resolve_ts(ts, [obj.last_op_ts])
        before = obj.to_state()
        after = change(before)
        obj.apply_state(after)
        body = {
            **payload(before),
            "confidence_before": before.confidence,
            "confidence_after": after.confidence,
        }
        op = oplog.admin_change(
            obj, op_type, ts=at, payload=body, actor_id=actor.id, actor_type=actor.type
        )
        obj.save(update_fields=MemoryObject.WRITABLE_FIELDS)
        store.get().insert(Operation, [op])
    return obj


def object_pin(
    *,
    client: ApiClient,
    object_id,
    reason: str,
    confidence: float | None = None,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """Pin (SPEC §1): operator-affirmed, optionally with a confidence up to the pin limit."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="PIN",
        change=lambda s: policy.pin(s, confidence),
        payload=lambda s: {"reason": reason, "confidence_requested": confidence},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_unpin(
    *,
    client: ApiClient,
    object_id,
    reason: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """Unpin clamps confidence to min(0.97, type ceiling), logging before and after (SPEC §1)."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="UNPIN",
        change=policy.unpin,
        payload=lambda s: {"reason": reason},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_transition(
    *,
    client: ApiClient,
    object_id,
    to: str,
    reason: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """An EPISTEMIC_TRANSITION (admin); "deprecate" is the transition to DEPRECATED."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="EPISTEMIC_TRANSITION",
        change=lambda s: policy.transition(s, to),
        payload=lambda s: {"from": s.epistemic_type, "to": to, "reason": reason},
        actor=actor or Actor.of(client),
        ts=ts,
    )


def object_condition(
    *,
    client: ApiClient,
    object_id,
    condition_state: str,
    actor: Actor | None = None,
    ts: datetime | None = None,
) -> MemoryObject:
    """CONDITION_CHANGED on a CONDITIONAL object (409 on any other type, or DEPRECATED)."""
    return _admin_change(
        client=client,
        object_id=object_id,
        op_type="CONDITION_CHANGED",
        change=lambda s: policy.change_condition(s, condition_state),
        payload=lambda s: {"from": s.condition_state, "to": condition_state},
        actor=actor or Actor.of(client),
        ts=ts,
    )


# --- signals (SPEC §2–§5) -------------------------------------------------------------------------


def tally_ledger(rows: Iterable[SessionTally]) -> policy.TallyLedger:
    """The ledger of tally rows already read (under the objects' locks)."""
    return policy.TallyLedger(
        {
            (row.object_id, row.session_id): (
                row.pk,
                policy.SessionTally(row.gamma_total, dict(row.repeats)),
            )
            for row in rows
        }
    )


def load_tallies(pairs: Iterable[tuple]) -> policy.TallyLedger:
    """The ledger of these (object id, session_id) pairs, read in one query; only read while
    the objects' row locks are held, so the write that follows cannot lose an update."""
    pairs = set(pairs)
    if not pairs:
        return policy.TallyLedger()
    rows = SessionTally.objects.filter(
        object_id__in={p[0] for p in pairs}, session_id__in={p[1] for p in pairs}
    )
    return tally_ledger(row for row in rows if (row.object_id, row.session_id) in pairs)


def write_tallies(db: store.Store, changes: policy.TallyChanges) -> None:
    """Insert the new tallies and update the changed ones."""

    def row(pk, object_id, session_id, tally):
        return new_row(
            SessionTally,
            id=pk,
            object_id=object_id,
            session_id=session_id,
            gamma_total=tally.gamma_total,
            repeats=tally.repeats,
        )

    db.insert(SessionTally, [row(None, *change) for change in changes.new])
    changed = [row(*change) for change in changes.changed]
    db.update(SessionTally, changed, ["gamma_total", "repeats"])


@dataclass
class SignalResult:
    signal: policy.Signal
    outcome: policy.Outcome
    feedback_op: oplog.OpRow
    change_op: oplog.OpRow | None

    @property
    def operation(self) -> oplog.OpRow:
        """The REINFORCE / PENALTY operation, or the FEEDBACK_EVENT when nothing changed."""
        return self.change_op or self.feedback_op

    @property
    def effect(self) -> str:
        return self.outcome.effect


def weights_of(outcome: policy.Outcome, signal: policy.Signal) -> tuple[float, float]:
    """(base weight, effective weight applied) of a processed signal."""
    base = policy.SIGNALS[signal.signal_type].base_weight
    if outcome.effect == policy.EFFECT_REINFORCED:
        return base, outcome.payload["gamma_effective"]
    if outcome.effect == policy.EFFECT_PENALIZED:
        return base, outcome.payload["delta"]
    return base, 0.0


def signal_ops(
    obj: MemoryObject,
    signal: policy.Signal,
    tallies: policy.TallyLedger,
    *,
    extra: dict | None = None,
    payload_json: str | None = None,
    key: oplog.ChainKey | None = None,
) -> SignalResult:
    """Apply one signal to a locked object: FEEDBACK_EVENT, then REINFORCE or PENALTY.

    The operations are returned unsaved; the object and the tally are updated in memory.
    ``payload_json``: the FEEDBACK_EVENT payload's canonical JSON when the caller knows it is
    the one of an earlier call (the automatic UNUSED of one session all carry one payload);
    ``key``: the object's ``oplog.ChainKey`` when the caller holds it.
    """
    if not policy.uses_tally(signal.signal_type):
        tally, outcome = None, policy.neutral_outcome(signal)
    else:
        tally = tallies.get(obj.pk, signal.session_id)
        outcome = policy.apply_signal(obj.to_state(), signal, tally)
    reliability, discount = policy.DETECTION_METHODS[signal.detection_method]
    base, effective = weights_of(outcome, signal)
    payload = {
        "signal_type": signal.signal_type,
        "detection_method": signal.detection_method,
        "reliability_class": reliability,
        "reliability_discount": discount,
        "base_weight": base,
        "effective_weight": effective,
        "effect": outcome.effect,
        "reason": outcome.reason,
        "session_id": signal.session_id,
        "evidence_ids": sorted(set(signal.evidence_ids)),
        **(extra or {}),
    }
    feedback_op = oplog.feedback_event(
        obj, signal=signal, payload=payload, payload_json=payload_json, key=key
    )
    change_op = None
    if outcome.op_type is not None:
        obj.apply_state(outcome.state)
        change_op = oplog.signal_applied(obj, outcome, signal, key)
        if outcome.tally is not tally:
            tallies.put(obj.pk, signal.session_id, outcome.tally)
    return SignalResult(signal, outcome, feedback_op, change_op)


def validate_client_signal(signal_type: str, detection_method: str | None) -> str:
    """Clients may not send what only the sweep produces (SPEC §2); returns the method."""
    if signal_type in policy.SYSTEM_ONLY_SIGNALS:
        raise DomainError(
            "system_only_signal",
            f"{signal_type} is produced only by the service's own sweep.",
            400,
            {"signal_type": [f"{signal_type} may not be sent by clients."]},
        )
    if detection_method in policy.SYSTEM_ONLY_METHODS:
        raise DomainError(
            "system_only_detection_method",
            f"{detection_method} is used only by the service's own sweep.",
            400,
            {"detection_method": [f"{detection_method} may not be sent by clients."]},
        )
    return policy.resolve_detection_method(signal_type, detection_method)
