from django.apps import AppConfig


class RmsConfig(AppConfig):
    name = "rms"
    verbose_name = "Memory objects"

    def ready(self) -> None:
        # Bind @shared_task to our configured app in every process that runs Django.
        import rms.api.schema  # noqa: F401  (registers OpenAPI extensions)
        from rms.celery import app  # noqa: F401
