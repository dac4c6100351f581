"""verify_webhook: Standard Webhooks signatures (``v1,<base64 HMAC-SHA256>`` of
``{id}.{timestamp}.{body}``, secret ``whsec_<base64 key>``), checked with the stdlib only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from rms_client import RMSError, sign_webhook, verify_webhook

KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
BODY = json.dumps({"id": "op-1", "type": "object.deprecated", "data": {"version": 3}}).encode()
NOW = 1_780_000_000


def headers(sig, ts=NOW, msg_id="op-1"):
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def reference_signature(msg_id, ts, body):
    """Written from the specification, independently of the client's own signer."""
    digest = hmac.new(KEY, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def test_a_valid_delivery_returns_its_event():
    sig = reference_signature("op-1", NOW, BODY)
    assert sign_webhook(SECRET, "op-1", NOW, BODY) == sig
    event = verify_webhook(SECRET, BODY, headers(sig), now=NOW + 10)
    assert event["type"] == "object.deprecated" and event["data"]["version"] == 3
    # any header case (Django's request.headers, WSGI), and a rotated list of signatures
    mixed = {"Webhook-Id": "op-1", "WEBHOOK-TIMESTAMP": str(NOW),
             "Webhook-Signature": f"v1,bm90LXRoaXM= {sig}"}  # fmt: skip
    assert verify_webhook(SECRET, BODY.decode(), mixed, now=NOW)["id"] == "op-1"


@pytest.mark.parametrize(
    "change",
    [
        {"body": BODY.replace(b"deprecated", b"pinned")},
        {"msg_id": "op-2"},
        {"secret": "whsec_" + base64.b64encode(b"another key").decode()},
        {"now": NOW + 301},  # older than the tolerance: a replay
        {"now": NOW - 301},
        {"sig": "v2," + reference_signature("op-1", NOW, BODY).split(",")[1]},
        {"drop": "webhook-signature"},
        {"drop": "webhook-timestamp"},
        {"ts": "soon"},
    ],
)
def test_anything_altered_is_invalid_signature(change):
    sig = change.get("sig", reference_signature("op-1", NOW, BODY))
    hdrs = headers(sig, ts=change.get("ts", NOW), msg_id=change.get("msg_id", "op-1"))
    hdrs.pop(change.get("drop", ""), None)
    with pytest.raises(RMSError) as exc:
        verify_webhook(
            change.get("secret", SECRET), change.get("body", BODY), hdrs, now=change.get("now", NOW)
        )
    assert exc.value.code == "invalid_signature" and exc.value.status is None
