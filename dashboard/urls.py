from django.urls import path

from dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("review/", views.review, name="review"),
    path("review/deprecate/", views.review_deprecate, name="review-deprecate"),
    path("objects/<uuid:object_id>/", views.object_detail, name="object"),
    path("objects/<uuid:object_id>/pin/", views.object_pin, name="object-pin"),
    path("objects/<uuid:object_id>/unpin/", views.object_unpin, name="object-unpin"),
    path("objects/<uuid:object_id>/deprecate/", views.object_deprecate, name="object-deprecate"),
    path("sessions/", views.sessions, name="sessions"),
    path("sessions/<uuid:session_pk>/", views.session_detail, name="session"),
    path("tasks/", views.tasks, name="tasks"),
    path("tasks/start/", views.task_start, name="task-start"),
    path("tasks/status.json", views.task_status, name="task-status"),
    path("simulations/", views.simulations, name="simulations"),
    path("evidence/", views.evidence, name="evidence"),
    path("webhooks/", views.webhooks, name="webhooks"),
    path("webhooks/action/", views.webhook_action, name="webhook-action"),
]
