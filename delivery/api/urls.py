from django.urls import path

from delivery.api import views

urlpatterns = [
    path("webhooks", views.WebhookListView.as_view(), name="webhooks"),
    path("webhooks/<str:webhook_id>", views.WebhookDetailView.as_view(), name="webhook-detail"),
    path(
        "webhooks/<str:webhook_id>/rotate-secret",
        views.WebhookRotateView.as_view(),
        name="webhook-rotate",
    ),
    path("webhooks/<str:webhook_id>/test", views.WebhookTestView.as_view(), name="webhook-test"),
    path(
        "webhooks/<str:webhook_id>/deliveries",
        views.DeliveryListView.as_view(),
        name="webhook-deliveries",
    ),
    path(
        "webhooks/<str:webhook_id>/deliveries/<str:delivery_id>/retry",
        views.DeliveryRetryView.as_view(),
        name="webhook-delivery-retry",
    ),
]
