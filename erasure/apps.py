from django.apps import AppConfig


class ErasureConfig(AppConfig):
    name = "erasure"
    default_auto_field = "django.db.models.BigAutoField"
