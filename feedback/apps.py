from django.apps import AppConfig


class FeedbackConfig(AppConfig):
    name = "feedback"
    verbose_name = "Feedback"

    def ready(self) -> None:
        from feedback.heartbeat import worker_liveness
        from feedback.selectors import aggregate_extra
        from rms.extensions import register_health_extra, register_object_extra

        register_object_extra(aggregate_extra)
        register_health_extra("worker", worker_liveness)
