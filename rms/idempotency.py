"""Idempotent writes (SPEC §7, API.md): one rule for every endpoint that takes a ``request_id``.

A write keyed by ``(client, request_id)`` stores the hash of its body and its first answer beside
what it creates, in the same transaction, under a unique key: a feedback session keeps them on
its own row (``FeedbackSession.body_hash`` / ``record``), a signal posted alone on an
``IdempotencyRecord``. A retry with the same body answers the first answer again (200); a
changed body is 409. Two requests racing with one key: the loser's transaction fails on the
unique key, is rolled back, and answers from the winner's row.

The key covers the whole request: a write whose target is in the path (a signal posted to
``/objects/{id}/signals``) hashes the target with the body (:func:`request_hash`), so the same
body sent to another object is a changed request (409), not a retry.
"""

from __future__ import annotations

import hashlib

from rms.errors import DomainError
from rms.models import ApiClient, IdempotencyRecord


def conflict(request_id: str) -> DomainError:
    return DomainError(
        "idempotency_mismatch",
        f"request_id {request_id!r} was already used with a different body.",
        409,
    )


def request_hash(body_hash: str, target: object) -> str:
    """The hash a keyed write whose target is in the path is compared on: target and body."""
    return hashlib.sha256(f"{target}\n{body_hash}".encode()).hexdigest()


def replay(request_id: str, stored_hash: str, body_hash: str, first_answer: dict) -> dict:
    """The first answer to this key, for a retry with the same body; 409 for another body."""
    if stored_hash != body_hash:
        raise conflict(request_id)
    return first_answer


def stored_answer(client: ApiClient, scope: str, request_id: str, body_hash: str) -> dict | None:
    """The first answer stored on an ``IdempotencyRecord`` for this key (:func:`replay`), or
    None when the key is new."""
    record = IdempotencyRecord.objects.filter(
        client=client, scope=scope, request_id=request_id
    ).first()
    if record is None:
        return None
    return replay(request_id, record.body_hash, body_hash, record.response)


def remember(client: ApiClient, scope: str, request_id: str, body_hash: str, answer: dict) -> None:
    """Store the first answer to this key (inside the write's transaction)."""
    IdempotencyRecord.objects.create(
        client=client, scope=scope, request_id=request_id, body_hash=body_hash, response=answer
    )
