"""Namespace writes: creation, and the namespace a client writes an object into."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from rms import extensions, oplog, store
from rms.errors import DomainError, Forbidden
from rms.models import ApiClient, Namespace, Operation
from rms.services.common import Actor

#: The operation on a namespace's chain that records a new retrieval profile; the change feed's
#: opt-in ``namespace.profile_changed`` (``rms.events``).
PROFILE_CHANGED = "PROFILE_CHANGED"
#: The settings ``namespace_update`` changes, each replaced whole when given.
UPDATABLE = ("retention_days", "weights", "retrieval")


def namespace_create(
    *,
    name: str,
    ignore_threshold: int | None = None,
    relevance_threshold: float | None = None,
    alert_thresholds: dict | None = None,
    weights: dict | None = None,
    retrieval: dict | None = None,
    retention_days: int | None = None,
) -> Namespace:
    ns = Namespace(name=name, retention_days=retention_days)
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


def namespace_set_retention(client: ApiClient, name: str, retention_days: int | None) -> Namespace:
    """An admin sets a namespace's retention period (None: keep forever)."""
    if not client.can_see(name):
        raise Forbidden(f"You may not change namespace {name!r}.")
    with transaction.atomic():
        ns = Namespace.objects.select_for_update().filter(name=name).first()
        if ns is None:
            raise DomainError("not_found", f"Namespace {name!r} does not exist.", 404)
        ns.retention_days = retention_days
        ns.save(update_fields=["retention_days"])
    return ns


def namespace_update(client: ApiClient, name: str, changes: dict) -> Namespace:
    """An admin changes a namespace's settings (``UPDATABLE``; each given one replaced whole).
    When the retrieval profile changes, the same transaction writes a PROFILE_CHANGED operation
    on the namespace's own chain carrying the new profile as ``/rank`` answers it, so that a
    score mirror following the change feed scores with it from that position on."""
    if not client.can_see(name):
        raise Forbidden(f"You may not change namespace {name!r}.")
    fields = [key for key in UPDATABLE if key in changes]
    with transaction.atomic():
        ns = Namespace.objects.select_for_update().filter(name=name).first()
        if ns is None:
            raise DomainError("not_found", f"Namespace {name!r} does not exist.", 404)
        before = extensions.namespace_profile(ns)
        for key in fields:
            value = changes[key]
            setattr(ns, key, value if key == "retention_days" else dict(value or {}))
        after = extensions.namespace_profile(ns)
        if after is not None and after != before:
            now = timezone.now()
            actor = Actor.of(client)
            op = oplog.namespace_op(
                ns,
                PROFILE_CHANGED,
                ts=max(now, ns.last_op_ts) if ns.last_op_ts else now,
                payload=after,
                actor_id=actor.id,
                actor_type=actor.type,
            )
            store.get().insert(Operation, [op])
            fields += ["head_hash", "last_op_ts"]
        if fields:
            ns.save(update_fields=fields)
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
