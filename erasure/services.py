"""Erasure (API.md ``/erasures``; docs/DECISIONS.md "Erasure"): requesting one, running it.

A request validates, stores the receipt row and a task run, and queues the run after commit.
The run rewrites every table in one transaction and appends, in the same transaction, one
OBJECT_ERASED operation on each erased object's chain and one ERASURE operation on the
namespace's chain; a worker killed midway leaves nothing half-done (the transaction rolls
back, the receipt still says ``running``) and the re-run (the reconciler re-queues it) starts
over. A completed erasure is never run twice.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from erasure import archive, tables
from erasure.models import Erasure
from rms import oplog, store
from rms.errors import DomainError, Forbidden, NotFound
from rms.models import ApiClient, MemoryObject, Namespace, Operation
from rms.redaction import ERASURE_OP, Rule, pseudonym, receipt_mac
from rms.replay import iso
from rms.verification import erasure_key
from taskruns import runs
from taskruns.models import TaskRun

TASK_KIND = "erasure"
ACTOR_TYPE = "SYSTEM_PROCESS"
FAILED = "Not erased (nothing was changed in the database; a retry completes it):"
NOTHING = "Nothing to erase: the subject is already erased or holds no personal data here."


# --- the request ---------------------------------------------------------------------------------


def _invalid(fields: dict[str, list[str]]) -> DomainError:
    return DomainError("validation_error", "The erasure request is invalid.", 400, fields)


def parse(body: Any) -> tuple[str, str, str, str]:
    """(kind, subject id, namespace, reason) of a request body; every problem at once (400)."""
    if not isinstance(body, dict):
        raise _invalid({"non_field_errors": ["Expected a JSON object."]})
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(body) - {"subject", "namespace", "reason"})
    errors.update({name: ["Unknown field."] for name in unknown})
    subject = body.get("subject")
    kind = sid = None
    if not isinstance(subject, dict):
        errors["subject"] = ['Must be an object {"kind": ..., "id": ...}.']
    else:
        kind, sid = subject.get("kind"), subject.get("id")
        if kind not in Erasure.KINDS:
            errors["subject.kind"] = [f"Must be one of: {', '.join(Erasure.KINDS)}."]
        if kind != "namespace" and (not isinstance(sid, str) or not sid or len(sid) > 200):
            errors["subject.id"] = ["Must be a non-empty string of at most 200 characters."]
        if kind == "object" and isinstance(sid, str) and not _is_uuid(sid):
            errors["subject.id"] = ["Must be an object id (a UUID)."]
    ns = body.get("namespace")
    # A namespace erasure erases ``namespace``: an id naming anything else is a contradiction
    # in an irreversible request, refused rather than ignored.
    if kind == "namespace" and "id" in subject and subject["id"] is not None and sid != ns:
        errors["subject.id"] = ["A namespace erasure's id must be the namespace, or be left out."]
    if not isinstance(ns, str) or not ns:
        errors["namespace"] = ["Required: the namespace to erase in."]
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        errors["reason"] = ["Must be a string of at most 500 characters."]
    # No text column takes a NUL (PostgreSQL refuses it outright), as DRF's CharField says.
    for field, value in (("subject.id", sid), ("namespace", ns), ("reason", reason)):
        if isinstance(value, str) and "\x00" in value:
            errors.setdefault(field, ["Null characters are not allowed."])
    if errors:
        raise _invalid(errors)
    if kind == "namespace":
        sid = ns
    return kind, sid, ns, reason


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def check_admin(client: ApiClient, namespace: str | None = None) -> None:
    """Admins only; an admin linked to namespaces is confined to them."""
    if client.role != ApiClient.ROLE_ADMIN:
        raise Forbidden("Only admins may erase.")
    if namespace is not None:
        linked = client.linked_namespace_names
        if linked and namespace not in linked:
            raise Forbidden(f"This admin may not erase in namespace {namespace!r}.")


def request(*, client: ApiClient, body: Any) -> Erasure:
    """Store the receipt and its task run; the run is queued after commit (202)."""
    check_admin(client)
    kind, sid, ns_name, reason = parse(body)
    check_admin(client, ns_name)
    ns = Namespace.objects.filter(name=ns_name).first()
    if ns is None:
        raise NotFound(f"Namespace {ns_name!r} does not exist.")
    with transaction.atomic():
        erasure = Erasure.objects.create(
            namespace=ns,
            subject_kind=kind,
            subject_id=_shown_id(kind, sid),
            pending_subject=sid,
            reason=reason,
            requested_by=client.name,
        )
        run = TaskRun.objects.create(
            kind=TASK_KIND, params={"erasure_id": str(erasure.pk)}, created_by=client.name
        )
        erasure.task_id = run.pk
        erasure.save(update_fields=["task_id"])
        runs.send_on_commit(run)
    return erasure


def _shown_id(kind: str, sid: str) -> str:
    """The subject id as the receipt shows it: an actor's pseudonym, never the raw id."""
    return pseudonym(erasure_key(), sid) if kind == "actor" else sid


def visible_erasure(client: ApiClient, erasure_id) -> Erasure:
    check_admin(client)
    if not _is_uuid(str(erasure_id)):
        raise NotFound("No such erasure.")
    erasure = Erasure.objects.select_related("namespace").filter(pk=erasure_id).first()
    linked = client.linked_namespace_names
    if erasure is None or (linked and erasure.namespace.name not in linked):
        raise NotFound("No such erasure.")
    return erasure


def receipt_out(e: Erasure) -> dict:
    return {
        "id": str(e.pk),
        "subject": {"kind": e.subject_kind, "id": e.subject_id},
        "namespace": e.namespace.name,
        "state": e.state,
        "message": e.message or None,
        "requested_at": iso(e.requested_at),
        "requested_by": e.requested_by,
        "completed_at": iso(e.completed_at),
        "counts": e.counts,
        "operation_id": str(e.operation_id) if e.operation_id else None,
        "task": str(e.task_id) if e.task_id else None,
    }


# --- the run -------------------------------------------------------------------------------------


def run(erasure_id, progress=None) -> dict:
    """Run one erasure (the ``erasure`` task kind): idempotent, all or nothing."""
    Erasure.objects.filter(pk=erasure_id, state__in=[Erasure.QUEUED, Erasure.FAILED]).update(
        state=Erasure.RUNNING, started_at=timezone.now()
    )
    try:
        with archive.retention_paused(erasure_id):
            pending = Erasure.objects.select_related("namespace").get(pk=erasure_id)
            # the archive first, outside the transaction: its files are rewritten and its
            # manifest records what the receipt must list, so a rerun after a kill lists it once
            archived = None if pending.state == Erasure.COMPLETED else _erase_archive(pending)
            _commit(erasure_id, archived)
    except Exception as exc:
        # rolled back: nothing in the database was erased (the archive part, if written, is
        # recorded in its manifest); the receipt says so, and a retry completes it
        Erasure.objects.filter(pk=erasure_id).exclude(state=Erasure.COMPLETED).update(
            state=Erasure.FAILED,
            message=f"{FAILED} {exc}"[:300],
        )
        raise
    store.forget_overwritten()
    if progress is not None:
        progress(1.0)
    return receipt_out(Erasure.objects.select_related("namespace").get(pk=erasure_id))


def _commit(erasure_id, archived: dict | None) -> None:
    """The log's part, the receipt and the receipt row's state: one transaction."""
    with transaction.atomic():
        erasure = Erasure.objects.select_for_update().select_related("namespace").get(pk=erasure_id)
        if erasure.state == Erasure.COMPLETED:
            return
        ns = Namespace.objects.select_for_update().get(pk=erasure.namespace_id)
        _erase(erasure, ns, archived)


def _rule(erasure: Erasure, ns: Namespace) -> tuple[tables.Scope, Rule]:
    scope = tables.scope_of(erasure.subject_kind, erasure.pending_subject, ns)
    return scope, tables.rule_for(erasure.subject_kind, scope, erasure_key())


def _erase_archive(erasure: Erasure) -> dict:
    return archive.erase_archive(erasure, _rule(erasure, erasure.namespace)[1])


def _erase(erasure: Erasure, ns: Namespace, archived: dict | None) -> None:
    kind = erasure.subject_kind
    key = erasure_key()
    scope, rule = _rule(erasure, ns)
    strings = tables.erased_strings(scope, rule)
    object_ids = list(scope.objects.values_list("pk", flat=True))
    archived = archived or {"redacted": [], "chains": []}
    listed = [*archived["redacted"], *tables.redact_operations(scope, rule)]
    counts = {
        "operations": len(listed),
        "archived_operations": len(archived["redacted"]),
        "checkpoints": tables.redact_checkpoints(archived["chains"], rule),
        "objects": tables.redact_objects(scope, rule),
        "actor_columns": tables.redact_actor_columns(scope, rule),
        "sessions": tables.redact_sessions(scope, rule),
        "tallies": tables.redact_tallies(scope, rule),
        "signals": tables.redact_signals(scope, rule),
        "spans": tables.redact_traces(scope, rule),
        "stored_answers": tables.redact_stored_answers(scope, rule, strings),
    }
    now = timezone.now()
    found = any(counts.values())
    # an object already erased (nothing changed) gets no second object.erased
    ops = _object_erased_ops(object_ids, erasure, kind, now) if found else []
    receipts = []
    parts = _parts(listed, [str(i) for i in object_ids], settings.RMS_ERASURE_RECEIPT_PAIRS)
    for part, (redacted, objects) in enumerate(parts, start=1):
        payload = {
            "erasure_id": str(erasure.pk),
            "subject": {"kind": kind, "id": erasure.subject_id},
            "requested_by": erasure.requested_by,
            "counts": counts,
            "part": part,
            "parts": len(parts),
            "redacted": redacted,
            "erased_objects": objects,
        }
        payload["mac"] = receipt_mac(key, payload)
        receipts.append(
            oplog.namespace_op(
                ns,
                ERASURE_OP,
                ts=max(now, ns.last_op_ts or now),
                payload=payload,
                actor_id=erasure.requested_by,
                actor_type=ACTOR_TYPE,
            )
        )
    store.get().insert(Operation, [*ops, *receipts])
    ns.save(update_fields=["head_hash", "last_op_ts"])
    erasure.state = Erasure.COMPLETED
    erasure.counts = counts
    erasure.operation_id = receipts[0].id
    erasure.completed_at = now
    erasure.pending_subject = ""
    erasure.message = (
        ""
        if found
        else "Nothing to erase: the subject is already erased or holds no personal data here."
    )
    erasure.save()


def _parts(listed: list, objects: list[str], size: int) -> list[tuple[list, list[str]]]:
    """The receipt's lists cut into parts of at most ``size`` entries each (at least one part,
    empty for an erasure that found nothing): one ERASURE operation per part."""
    size = max(1, size)
    count = max(1, -(-max(len(listed), len(objects)) // size))
    return [
        (listed[i * size : (i + 1) * size], objects[i * size : (i + 1) * size])
        for i in range(count)
    ]


def _object_erased_ops(object_ids: list, erasure: Erasure, kind: str, now) -> list:
    """An OBJECT_ERASED operation on each erased object's chain (its ``object.erased`` event):
    the objects are locked and saved with their new head, as every chain write is."""
    ops = []
    objects = MemoryObject.objects.select_for_update().filter(pk__in=object_ids).order_by("pk")
    for obj in objects.select_related("namespace"):
        key = oplog.ChainKey.of(obj)
        ops.append(
            oplog.object_erased(
                obj,
                ts=max(now, obj.last_op_ts or now),
                payload={"subject_kind": kind, "erasure_id": str(erasure.pk)},
                actor_id=erasure.requested_by,
                actor_type=ACTOR_TYPE,
                key=key,
            )
        )
        obj.save(update_fields=["version", "head_hash", "last_op_ts"])
    return ops
