from django.contrib import admin
from django.urls import include, path, re_path

from rms.api.errors import api_not_found
from rms.api.views import PrometheusView

urlpatterns = [
    path("api/v1/", include("rms.api.urls")),
    path("api/v1/", include("feedback.api.urls")),
    path("api/v1/", include("delivery.api.urls")),
    path("api/v1/", include("erasure.urls")),
    path("api/v1/otlp/", include("otlp.urls")),
    path("metrics", PrometheusView.as_view(), name="prometheus"),
    # Keep last among the API routes: any other path under /api/ is the contract's JSON 404,
    # also with DEBUG on (where Django would render its HTML 404 page instead of handler404).
    re_path(r"^api/", api_not_found),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("dashboard.urls")),
]

handler400 = "rms.api.errors.handler400"
handler403 = "rms.api.errors.handler403"
handler404 = "rms.api.errors.handler404"
handler500 = "rms.api.errors.handler500"
