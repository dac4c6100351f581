from django.contrib import admin
from django.urls import include, path

from rms.api.views import PrometheusView

urlpatterns = [
    path("api/v1/", include("rms.api.urls")),
    path("api/v1/", include("feedback.api.urls")),
    path("api/v1/", include("delivery.api.urls")),
    path("metrics", PrometheusView.as_view(), name="prometheus"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("dashboard.urls")),
]

handler404 = "rms.api.errors.handler404"
handler500 = "rms.api.errors.handler500"
