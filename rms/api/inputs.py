"""Request bodies shared by the API views of every app: validation through an input serializer
and the body's hash for idempotent replays."""

from __future__ import annotations

import hashlib

from rms.oplog import canonical_json


def body_hash(request) -> str:
    """Canonical JSON of the body as sent, before defaults are filled in (SPEC §7)."""
    return hashlib.sha256(canonical_json(request.data).encode()).hexdigest()


def validated(serializer_class, data) -> dict:
    ser = serializer_class(data=data)
    ser.is_valid(raise_exception=True)
    return dict(ser.validated_data)
