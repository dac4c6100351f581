"""Feedback API views: signals (and feedback sessions in the ingestion issue)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from feedback import services
from rms.api.permissions import WRITERS
from rms.api.serializers import SignalIn, objects_out, operation_out
from rms.api.views import body_hash, parse_uuid, validated


def signal_answer(result, obj) -> dict:
    return {
        "operation": operation_out(result.operation),
        "effect": result.effect,
        "object": objects_out([obj], timezone.now())[0],
    }


class ObjectSignalView(APIView):
    roles = {"POST": WRITERS}

    @extend_schema(
        request=SignalIn,
        responses={201: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT},
        description="One signal: FEEDBACK_EVENT plus REINFORCE/PENALTY. With request_id, "
        "a retry returns the first answer (200); a changed body is 409.",
    )
    def post(self, request, object_id: str):
        object_uuid = parse_uuid(object_id)
        data = validated(SignalIn, request.data)
        status, answer = services.signal_record(
            client=request.auth,
            object_id=object_uuid,
            data=data,
            body_hash=body_hash(request),
            render=signal_answer,
        )
        return Response(answer, status=status)
