from django.apps import AppConfig


class FeedbackConfig(AppConfig):
    name = "feedback"
    verbose_name = "Feedback"

    def ready(self) -> None:
        from feedback.selectors import aggregate_extra
        from rms.extensions import register_object_extra

        register_object_extra(aggregate_extra)

        from feedback.retrieval import stored_profile_out
        from rms.extensions import register_namespace_profile

        register_namespace_profile(stored_profile_out)

        from feedback.selectors import object_filters

        object_filters.register()

        from feedback.api.openapi import AggregateOut
        from rms.api.openapi import register_object_field

        register_object_field("aggregate", AggregateOut())

        from feedback.selectors import retrieval_quality_gauges
        from rms.telemetry import register_state_reader

        register_state_reader(retrieval_quality_gauges)
