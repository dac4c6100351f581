"""POST /erasures and GET /erasures/{id} (API.md): admins only; thin views."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from erasure import openapi, services
from rms import degraded
from rms.api import openapi as core_openapi
from rms.api.base import APIView
from rms.api.permissions import ADMIN
from taskruns import runs

ADMIN_ONLY = {"*": (ADMIN,)}


class ErasureListView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="erasures_create",
        request=openapi.ErasureIn,
        responses={202: openapi.ErasureQueued, 404: core_openapi.error("No such namespace.")},
        description=(
            'Erase a subject\'s personal fields: `{"subject": {"kind": "object|actor|session|'
            'namespace", "id": ...}, "namespace": ..., "reason": ...}` → 202 `{id, task}`; '
            "the receipt is at /erasures/{id}. A subject with nothing to erase completes with "
            "counts 0 and a message."
        ),
    )
    def post(self, request):
        erasure = services.request(client=request.auth, body=request.data)
        out = {"id": str(erasure.pk), "task": str(erasure.task_id)}
        if warnings := degraded.broker_warnings(runs.send_failed(erasure.task_id)):
            out["warnings"] = warnings
        return Response(out, status=202)


class ErasureDetailView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="erasures_retrieve",
        responses={200: openapi.Receipt, 404: core_openapi.error("No such erasure.")},
    )
    def get(self, request, erasure_id):
        erasure = services.visible_erasure(request.auth, erasure_id)
        return Response(services.receipt_out(erasure))
