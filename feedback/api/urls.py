from django.urls import path

from feedback.api import views

urlpatterns = [
    path(
        "objects/<str:object_id>/signals", views.ObjectSignalView.as_view(), name="object-signals"
    ),
    path("feedback-sessions", views.FeedbackSessionView.as_view(), name="feedback-sessions"),
    path(
        "feedback-sessions/batch",
        views.FeedbackSessionBatchView.as_view(),
        name="feedback-sessions-batch",
    ),
    path(
        "feedback-sessions/<str:session_id>",
        views.FeedbackSessionDetailView.as_view(),
        name="feedback-session-detail",
    ),
    path("metrics", views.MetricsView.as_view(), name="metrics"),
    path("alerts", views.AlertListView.as_view(), name="alerts"),
    path("review-queue", views.ReviewQueueView.as_view(), name="review-queue"),
    path("retrieval-quality", views.RetrievalQualityView.as_view(), name="retrieval-quality"),
    path("rank", views.RankView.as_view(), name="rank"),
    path("suppressed", views.SuppressedView.as_view(), name="suppressed"),
    path("ranking-state", views.RankingStateView.as_view(), name="ranking-state"),
    path("detect", views.DetectView.as_view(), name="detect"),
    path("export/<str:kind>.csv", views.ExportView.as_view(), name="export"),
    path("tasks", views.TaskListView.as_view(), name="tasks"),
    path("tasks/<str:task_id>", views.TaskDetailView.as_view(), name="task-detail"),
]
