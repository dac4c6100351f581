"""Object creation (SPEC §1, §6): one transaction creates the objects and appends their
OBJECT_CREATED operations, all or nothing.

Locks: none are needed, a new id has no chain yet; a concurrent create of the same id loses on
the primary key. Retries: none; it either commits entirely or raises and writes nothing.
"""

from __future__ import annotations

import uuid

from django.db import IntegrityError, transaction
from django.utils import timezone

from rms import oplog, policy, store
from rms.errors import DomainError
from rms.models import ApiClient, MemoryObject, Namespace, Operation
from rms.services.common import Actor
from rms.services.namespaces import namespace_for_write


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
