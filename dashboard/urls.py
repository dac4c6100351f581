from django.urls import path

from dashboard.views import (
    alerts,
    browser,
    erasures,
    evidence,
    objects,
    overview,
    retrieval,
    review,
    sessions,
    simulations,
    suppressed,
    tasks,
    webhooks,
)

app_name = "dashboard"
urlpatterns = [
    path("", overview.overview, name="overview"),
    path("retrieval/", retrieval.retrieval, name="retrieval"),
    path("review/", review.review, name="review"),
    path("review/deprecate/", review.review_deprecate, name="review-deprecate"),
    path("objects/", browser.browser, name="objects"),
    path("objects/bulk/", browser.browser_bulk, name="objects-bulk"),
    path("objects/<uuid:object_id>/", objects.object_detail, name="object"),
    path("objects/<uuid:object_id>/pin/", objects.object_pin, name="object-pin"),
    path("objects/<uuid:object_id>/unpin/", objects.object_unpin, name="object-unpin"),
    path("objects/<uuid:object_id>/deprecate/", objects.object_deprecate, name="object-deprecate"),
    path("alerts/", alerts.alerts, name="alerts"),
    path("suppressed/", suppressed.suppressed, name="suppressed"),
    path("sessions/", sessions.sessions, name="sessions"),
    path("sessions/<uuid:session_pk>/", sessions.session_detail, name="session"),
    path("tasks/", tasks.tasks, name="tasks"),
    path("tasks/start/", tasks.task_start, name="task-start"),
    path("tasks/status.json", tasks.task_status, name="task-status"),
    path("simulations/", simulations.simulations, name="simulations"),
    path("evidence/", evidence.evidence, name="evidence"),
    path("webhooks/", webhooks.webhooks, name="webhooks"),
    path("webhooks/action/", webhooks.webhook_action, name="webhook-action"),
    path("erasures/", erasures.erasures, name="erasures"),
    path("erasures/request/", erasures.erasure_request, name="erasure-request"),
]
