from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


class RmsConfig(AppConfig):
    name = "rms"
    verbose_name = "Memory objects"

    def ready(self) -> None:
        # Bind @shared_task to our configured app in every process that runs Django.
        import rms.api.schema  # noqa: F401  (registers OpenAPI extensions)
        from rms.celery import app  # noqa: F401

        post_migrate.connect(_sync_change_indexes, sender=self)


def _sync_change_indexes(sender, using: str = "default", **kwargs) -> None:
    """The change feed's partial indexes follow the change operations in ``rms.events``."""
    from rms.store.feed import sync_change_indexes

    sync_change_indexes(connections[using])
