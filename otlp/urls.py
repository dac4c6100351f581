from django.urls import path

from otlp import api

urlpatterns = [
    path("v1/traces", api.TraceExportView.as_view(), name="otlp-traces"),
]
