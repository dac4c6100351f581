from django.urls import path

from erasure import api

urlpatterns = [
    path("erasures", api.ErasureListView.as_view(), name="erasures"),
    path("erasures/<str:erasure_id>", api.ErasureDetailView.as_view(), name="erasure-detail"),
]
