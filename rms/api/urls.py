from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from rms.api import changes, edges, views

urlpatterns = [
    path("health", views.HealthView.as_view(), name="health"),
    path(
        "schema",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[AllowAny]),
        name="schema",
    ),
    path(
        "docs",
        # The split view serves its start-up script as a file: no inline script, as the
        # Content-Security-Policy requires.
        SpectacularSwaggerSplitView.as_view(
            url_name="schema", authentication_classes=[], permission_classes=[AllowAny]
        ),
        name="docs",
    ),
    path("namespaces", views.NamespaceListView.as_view(), name="namespaces"),
    path("namespaces/<str:name>", views.NamespaceDetailView.as_view(), name="namespace-detail"),
    path("objects", views.ObjectListView.as_view(), name="objects"),
    path("objects/<str:object_id>", views.ObjectDetailView.as_view(), name="object-detail"),
    path("objects/<str:object_id>/state", views.ObjectStateView.as_view(), name="object-state"),
    path(
        "objects/<str:object_id>/explain",
        views.ObjectExplainView.as_view(),
        name="object-explain",
    ),
    path(
        "objects/<str:object_id>/operations",
        views.ObjectOperationsView.as_view(),
        name="object-operations",
    ),
    path("objects/<str:object_id>/pin", views.ObjectPinView.as_view(), name="object-pin"),
    path("objects/<str:object_id>/unpin", views.ObjectUnpinView.as_view(), name="object-unpin"),
    path(
        "objects/<str:object_id>/transition",
        views.ObjectTransitionView.as_view(),
        name="object-transition",
    ),
    path(
        "objects/<str:object_id>/relationships",
        edges.ObjectRelationshipsView.as_view(),
        name="object-relationships",
    ),
    path("relationships", edges.RelationshipListView.as_view(), name="relationships"),
    path(
        "relationships/<str:relationship_id>",
        edges.RelationshipDetailView.as_view(),
        name="relationship-detail",
    ),
    path(
        "relationships/<str:relationship_id>/evidence",
        edges.RelationshipEvidenceView.as_view(),
        name="relationship-evidence",
    ),
    path("changes", changes.ChangesView.as_view(), name="changes"),
    path("graph/expand", edges.GraphExpandView.as_view(), name="graph-expand"),
    path("calibration", edges.CalibrationView.as_view(), name="calibration"),
    path(
        "objects/<str:object_id>/condition",
        views.ObjectConditionView.as_view(),
        name="object-condition",
    ),
]
