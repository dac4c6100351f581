"""Webhook endpoint writes (API.md "The closed loop"): admins only; each one transaction.

Secrets are ``whsec_`` + base64 of 24 random bytes (the Standard Webhooks format), returned only
by ``endpoint_create`` and ``endpoint_rotate_secret``.
"""

from __future__ import annotations

import base64
import logging
import secrets
import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from delivery import safety
from delivery.dispatch import disable
from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import changes, events
from rms.errors import DomainError, NotFound, unknown_fields
from rms.models import Namespace

logger = logging.getLogger(__name__)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _fields_error(field: str, message: str) -> DomainError:
    return DomainError("validation_error", "The request is invalid.", 400, {field: [message]})


def check_url(url: Any) -> str:
    if not isinstance(url, str) or not url or len(url) > 2000:
        raise _fields_error("url", "Must be an http(s) URL of at most 2000 characters.")
    try:
        safety.resolve(url)
    except safety.UnsafeURL as exc:
        raise _fields_error("url", str(exc)) from exc
    return url


def check_namespaces(names: Any) -> list[str]:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _fields_error("namespaces", "Must be a list of namespace names.")
    names = sorted(set(names))
    known = set(Namespace.objects.filter(name__in=names).values_list("name", flat=True))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise _fields_error("namespaces", f"Unknown namespace(s): {', '.join(unknown)}.")
    return names


def check_event_types(types: Any) -> list[str]:
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise _fields_error("event_types", "Must be a list of event types.")
    try:
        parsed = events.parse_types(types)
    except events.FeedError as exc:
        raise _fields_error("event_types", exc.message) from exc
    return sorted(parsed or ())


def check_description(description: Any) -> str:
    if not isinstance(description, str) or len(description) > 500:
        raise _fields_error("description", "Must be text of at most 500 characters.")
    return description


def endpoint_create(
    *, created_by: str, url: Any, namespaces: Any = (), event_types: Any = (), description=""
) -> tuple[WebhookEndpoint, str]:
    """A new active endpoint that receives the events committed after it was created."""
    endpoint = WebhookEndpoint(
        url=check_url(url),
        namespaces=check_namespaces(list(namespaces)),
        event_types=check_event_types(list(event_types)),
        description=check_description(description),
        secret=new_secret(),
        created_by=created_by,
    )
    head = changes.head()
    endpoint.cursor_txid, endpoint.cursor_seq = head.txid, head.seq
    endpoint.save()
    return endpoint, endpoint.secret


def get_endpoint(endpoint_id, *, lock: bool = False) -> WebhookEndpoint:
    try:
        pk = uuid.UUID(str(endpoint_id))
    except ValueError as exc:
        raise NotFound("No such webhook endpoint.") from exc
    qs = WebhookEndpoint.objects.select_for_update() if lock else WebhookEndpoint.objects
    endpoint = qs.filter(pk=pk).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.")
    return endpoint


def endpoint_update(*, endpoint_id, data: dict) -> WebhookEndpoint:
    """PATCH: url, namespaces, event_types, description, state. Re-enabling resumes at the head
    of the log and clears the failure count (missed events stay readable in the feed)."""
    allowed = {"url", "namespaces", "event_types", "description", "state"}
    if unknown := unknown_fields(data, allowed):
        raise DomainError("validation_error", "The request is invalid.", 400, unknown)
    clean: dict[str, Any] = {}
    if "url" in data:
        clean["url"] = check_url(data["url"])
    if "namespaces" in data:
        clean["namespaces"] = check_namespaces(data["namespaces"])
    if "event_types" in data:
        clean["event_types"] = check_event_types(data["event_types"])
    if "description" in data:
        clean["description"] = check_description(data["description"])
    if "state" in data and data["state"] not in WebhookEndpoint.STATES:
        raise _fields_error("state", "Must be active or disabled.")
    with transaction.atomic():
        endpoint = get_endpoint(endpoint_id, lock=True)
        for name, value in clean.items():
            setattr(endpoint, name, value)
        state = data.get("state")
        if state == WebhookEndpoint.ACTIVE and endpoint.state != WebhookEndpoint.ACTIVE:
            head = changes.head()
            endpoint.cursor_txid, endpoint.cursor_seq = head.txid, head.seq
            endpoint.state = WebhookEndpoint.ACTIVE
            endpoint.disabled_reason = ""
            endpoint.consecutive_failures = 0
            endpoint.failing_since = None
            endpoint.blocked_until = None
        elif state == WebhookEndpoint.DISABLED and endpoint.state != WebhookEndpoint.DISABLED:
            disable(endpoint, "Disabled by an admin.", now=timezone.now())
        endpoint.save()
    return endpoint


def endpoint_delete(*, endpoint_id) -> None:
    with transaction.atomic():
        get_endpoint(endpoint_id, lock=True).delete()


def endpoint_rotate_secret(*, endpoint_id) -> str:
    """A new secret; the old one stops signing at once (attempts read it when they start)."""
    with transaction.atomic():
        endpoint = get_endpoint(endpoint_id, lock=True)
        endpoint.secret = new_secret()
        endpoint.save(update_fields=["secret"])
    return endpoint.secret


def _kick() -> None:
    """Ask a worker for a dispatcher pass once the transaction commits; a broker outage only
    delays it until beat's next pass."""
    from delivery.tasks import dispatch_webhooks

    def send() -> None:
        try:
            dispatch_webhooks.delay()
        except Exception:  # broker down: beat's next pass delivers it
            logger.warning("could not enqueue a webhook dispatch; beat will pick it up")

    transaction.on_commit(send)


def endpoint_test(*, endpoint_id) -> WebhookDelivery:
    """A ``webhook.test`` event (not an operation), delivered like any other."""
    now = timezone.now()
    event = {
        "id": str(uuid.uuid4()),
        "cursor": None,
        "type": events.WEBHOOK_TEST,
        "ts": now.isoformat(),
        "namespace": None,
        "target_type": None,
        "target_id": None,
        "op_type": None,
        "data": {},
    }
    with transaction.atomic():
        endpoint = get_endpoint(endpoint_id, lock=True)
        if endpoint.state != WebhookEndpoint.ACTIVE:
            raise DomainError("endpoint_disabled", "The endpoint is disabled.", 409)
        delivery = WebhookDelivery.objects.create(
            endpoint=endpoint,
            event_id=event["id"],
            event_type=event["type"],
            event=event,
            next_attempt_at=now,
        )
        _kick()
    return delivery


def delivery_retry(*, endpoint_id, delivery_id) -> WebhookDelivery:
    """Attempt a pending or failed delivery now (a failed one gets a fresh retry window)."""
    try:
        pk = uuid.UUID(str(delivery_id))
    except ValueError as exc:
        raise NotFound("No such delivery.") from exc
    now = timezone.now()
    with transaction.atomic():
        endpoint = get_endpoint(endpoint_id, lock=True)
        delivery = (
            WebhookDelivery.objects.select_for_update().filter(pk=pk, endpoint=endpoint).first()
        )
        if delivery is None:
            raise NotFound("No such delivery.")
        if delivery.state == WebhookDelivery.SUCCEEDED:
            raise DomainError("already_delivered", "The delivery already succeeded.", 409)
        if endpoint.state != WebhookEndpoint.ACTIVE:
            raise DomainError("endpoint_disabled", "The endpoint is disabled.", 409)
        if delivery.state == WebhookDelivery.FAILED:
            delivery.retry_until = None  # set again by the next attempt
        delivery.state = WebhookDelivery.PENDING
        delivery.next_attempt_at = now
        delivery.save(update_fields=["state", "next_attempt_at", "retry_until"])
        endpoint.blocked_until = None
        endpoint.save(update_fields=["blocked_until"])
        _kick()
    return delivery
