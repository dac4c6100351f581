from django.apps import AppConfig


class TaskRunsConfig(AppConfig):
    name = "taskruns"
    verbose_name = "Task runs"

    def ready(self) -> None:
        from rms.extensions import register_health_extra
        from rms.telemetry import register_state_reader
        from taskruns import tasks  # noqa: F401  registers the Celery tasks
        from taskruns.heartbeat import worker_liveness
        from taskruns.selectors import task_run_gauges

        register_state_reader(task_run_gauges)
        register_health_extra("worker", worker_liveness)
