from django.urls import path

from dashboard.views import (
    evidence,
    objects,
    overview,
    retention,
    review,
    sessions,
    simulations,
    tasks,
    webhooks,
)

app_name = "dashboard"
urlpatterns = [
    path("", overview.overview, name="overview"),
    path("review/", review.review, name="review"),
    path("review/deprecate/", review.review_deprecate, name="review-deprecate"),
    path("objects/<uuid:object_id>/", objects.object_detail, name="object"),
    path("objects/<uuid:object_id>/pin/", objects.object_pin, name="object-pin"),
    path("objects/<uuid:object_id>/unpin/", objects.object_unpin, name="object-unpin"),
    path("objects/<uuid:object_id>/deprecate/", objects.object_deprecate, name="object-deprecate"),
    path("sessions/", sessions.sessions, name="sessions"),
    path("sessions/<uuid:session_pk>/", sessions.session_detail, name="session"),
    path("tasks/", tasks.tasks, name="tasks"),
    path("tasks/start/", tasks.task_start, name="task-start"),
    path("tasks/status.json", tasks.task_status, name="task-status"),
    path("simulations/", simulations.simulations, name="simulations"),
    path("evidence/", evidence.evidence, name="evidence"),
    path("webhooks/", webhooks.webhooks, name="webhooks"),
    path("webhooks/action/", webhooks.webhook_action, name="webhook-action"),
    path("retention/", retention.retention, name="retention"),
    path("retention/set/", retention.retention_set, name="retention-set"),
]
