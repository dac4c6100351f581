from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Webhooks: endpoints, the dispatcher that follows the change feed, the delivery log."""

    name = "delivery"
    default_auto_field = "django.db.models.BigAutoField"
