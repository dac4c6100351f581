from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        # A request queues compute_suppressed by name (taskruns.enqueue): the web process must
        # know the task, not only the worker (whose autodiscovery finds it).
        from dashboard import tasks  # noqa: F401  registers the Celery tasks
