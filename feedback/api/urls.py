from django.urls import path

from feedback.api import views

urlpatterns = [
    path(
        "objects/<str:object_id>/signals", views.ObjectSignalView.as_view(), name="object-signals"
    ),
]
