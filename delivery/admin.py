"""Read-only admin views of webhooks; the secret is never shown (nor editable) here."""

from django.contrib import admin

from delivery.models import WebhookDelivery, WebhookEndpoint
from rms.admin import ReadOnlyAdmin


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    list_display = ("url", "state", "consecutive_failures", "last_success_at", "created_at")
    list_filter = ("state",)
    exclude = ("secret",)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ("event_type", "event_id", "endpoint", "state", "attempts", "created_at")
    list_filter = ("state", "event_type")
    list_select_related = ("endpoint",)
