"""Verification of a webhook delivery (Standard Webhooks, as API.md sends them), stdlib only."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

from rms_client.errors import RMSError

SECRET_PREFIX = "whsec_"
#: Seconds a delivery's timestamp may be off from now (either way): older ones are replays.
DEFAULT_TOLERANCE = 300


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        return secret
    raw = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RMSError(None, "invalid_secret", "The secret is not whsec_<base64>.") from exc


def sign_webhook(secret: str | bytes, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """The ``webhook-signature`` value (``v1,<base64>``) for a delivery."""
    payload = body if isinstance(body, bytes) else body.encode()
    signed = f"{msg_id}.{timestamp}.".encode() + payload
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        lowered = {k.lower(): v for k, v in headers.items()}
        value = lowered.get(name) or lowered.get("http_" + name.replace("-", "_"))
    return value


def verify_webhook(
    secret: str | bytes,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a delivery's signature and timestamp and return its event (the parsed body).

    Raises ``RMSError`` with code ``invalid_signature`` (status ``None``) when a header is
    missing, the timestamp is more than ``tolerance`` seconds from now, or no ``v1`` signature
    in ``webhook-signature`` matches. ``headers`` may be any mapping (Django's
    ``request.headers``, a plain dict with any case).
    """
    msg_id = _header(headers, "webhook-id")
    stamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    if not msg_id or not stamp or not signatures:
        raise RMSError(None, "invalid_signature", "Missing webhook-id, -timestamp or -signature.")
    try:
        ts = int(stamp)
    except ValueError:
        raise RMSError(None, "invalid_signature", "Malformed webhook-timestamp.") from None
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance:
        raise RMSError(None, "invalid_signature", "The webhook timestamp is outside tolerance.")
    expected = sign_webhook(secret, msg_id, ts, body).split(",", 1)[1]
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            break
    else:
        raise RMSError(None, "invalid_signature", "No webhook signature matches.")
    try:
        return json.loads(body)
    except ValueError:
        raise RMSError(None, "invalid_signature", "The signed body is not JSON.") from None
