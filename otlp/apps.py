from django.apps import AppConfig


class OtlpConfig(AppConfig):
    name = "otlp"
    verbose_name = "OTLP ingestion"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from otlp import tasks  # noqa: F401  registers the Celery tasks, queued by name
