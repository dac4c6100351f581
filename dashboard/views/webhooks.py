"""The webhooks page (admin): endpoints, their deliveries, and the actions on them."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.permissions import ADMINS, dashboard_view
from dashboard.views.common import page_of, redirect_back
from delivery import selectors as delivery_selectors
from delivery import services as delivery_services
from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import events
from rms.errors import DomainError

# --- webhooks (admin) -----------------------------------------------------------------------


def _webhooks_context(request) -> dict:
    endpoints = list(delivery_selectors.endpoints_with_stats())
    for endpoint in endpoints:
        endpoint.success_rate = delivery_selectors.success_rate(endpoint)
    by_id = {str(e.pk): e for e in endpoints}
    chosen = by_id.get(request.GET.get("endpoint") or "")
    state = request.GET.get("state")
    state = state if state in WebhookDelivery.STATES else ""
    event_type = request.GET.get("event_type")
    event_type = event_type if event_type in events.EVENT_TYPES else ""
    qs = delivery_selectors.deliveries(
        endpoint=chosen, state=state or None, event_type=event_type or None
    )
    return {
        "endpoints": endpoints,
        "chosen": chosen,
        "state": state,
        "event_type": event_type,
        "states": WebhookDelivery.STATES,
        "event_types": events.EVENT_TYPES,
        "feed_types": events.FEED_TYPES,
        "namespaces": list(request.access.namespaces()),
        "page": page_of(request, qs),
        # Where the page's forms come back to: this page (an answer to a POST is the page too).
        "back": request.get_full_path()
        if request.method == "GET"
        else reverse("dashboard:webhooks"),
    }


@require_GET
@dashboard_view(ADMINS)
def webhooks(request):
    return render(request, "dashboard/webhooks.html", _webhooks_context(request))


@require_POST
@dashboard_view(ADMINS)
def webhook_action(request):
    """Create, test, rotate, enable, disable, delete an endpoint, or retry a delivery. A new or
    rotated secret is shown once, in this answer (never stored in a message or a redirect)."""
    action = request.POST.get("action")
    endpoint_id = request.POST.get("endpoint")
    secret = None
    try:
        if action == "create":
            endpoint, secret = delivery_services.endpoint_create(
                created_by=request.access.client.name,
                url=request.POST.get("url", "").strip(),
                namespaces=request.POST.getlist("namespaces"),
                event_types=request.POST.getlist("event_types"),
                description=request.POST.get("description", "").strip(),
            )
            endpoint_id = str(endpoint.pk)
        elif action == "rotate":
            secret = delivery_services.endpoint_rotate_secret(endpoint_id=endpoint_id)
        elif action == "test":
            delivery_services.endpoint_test(endpoint_id=endpoint_id)
            messages.success(request, "Test event queued; it appears in the deliveries below.")
        elif action in ("enable", "disable"):
            state = WebhookEndpoint.ACTIVE if action == "enable" else WebhookEndpoint.DISABLED
            delivery_services.endpoint_update(endpoint_id=endpoint_id, data={"state": state})
            messages.success(request, f"Endpoint {'re-enabled' if state == 'active' else state}.")
        elif action == "delete":
            delivery_services.endpoint_delete(endpoint_id=endpoint_id)
            messages.success(request, "Endpoint deleted.")
        elif action == "retry":
            delivery_services.delivery_retry(
                endpoint_id=endpoint_id, delivery_id=request.POST.get("delivery")
            )
            messages.success(request, "Retry queued.")
        else:
            messages.error(request, "Unknown action.")
    except DomainError as exc:
        detail = "; ".join(m for msgs in (exc.fields or {}).values() for m in msgs)
        messages.error(request, detail or exc.message)
    if secret is None:
        return redirect_back(request, reverse("dashboard:webhooks"))
    context = _webhooks_context(request)
    context.update({"new_secret": secret, "secret_endpoint": endpoint_id})
    return render(request, "dashboard/webhooks.html", context)
