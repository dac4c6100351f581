from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    """Webhooks: endpoints, the dispatcher that follows the change feed, the delivery log."""

    name = "delivery"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from delivery.selectors import webhook_gauges
        from rms.telemetry import register_state_reader

        register_state_reader(webhook_gauges)
