"""``POST /api/v1/otlp/v1/traces``: OTLP/HTTP trace export (API.md; the OTLP specification).

Thin: decode (``otlp.decode``), one service call (``otlp.services.spans_receive``), answer an
ExportTraceServiceResponse. Every answer — errors included, whatever raised them (401, 403, the
throttle's 429, the database's 503) — is in the encoding of the request: a ``google.rpc.Status``
for protobuf, the contract's JSON error shape for JSON.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from otlp import decode, services
from rms.api.errors import error_body
from rms.api.permissions import WRITERS


class _AnyAccept(BaseContentNegotiation):
    """Exporters send ``Accept: application/x-protobuf`` or nothing; the answer's encoding
    follows the request's Content-Type, so Accept is not negotiated (never a 406)."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return JSONRenderer(), JSONRenderer.media_type


def _media(request) -> str:
    return decode.media_type(request.META.get("CONTENT_TYPE")) or decode.JSON


class TraceExportView(APIView):
    roles = {"POST": WRITERS}
    parser_classes: list = []  # the body is decoded here, as bytes
    content_negotiation_class = _AnyAccept

    @extend_schema(
        operation_id="otlp_traces_export",
        request={
            decode.PROTOBUF: OpenApiTypes.BINARY,
            decode.JSON: OpenApiTypes.OBJECT,
        },
        responses={
            200: OpenApiResponse(
                inline_serializer(
                    "ExportTraceServiceResponse",
                    fields={
                        "partialSuccess": inline_serializer(
                            "ExportTracePartialSuccess",
                            fields={
                                "rejectedSpans": serializers.CharField(
                                    help_text="int64, as protobuf's JSON mapping writes it"
                                ),
                                "errorMessage": serializers.CharField(),
                            },
                            required=False,
                        )
                    },
                ),
                description="ExportTraceServiceResponse (protobuf for a protobuf request); "
                "partial_success says how many spans were rejected and why.",
            )
        },
        description="OTLP/HTTP trace export (protobuf or JSON, optionally gzip). Spans about "
        "memory become feedback sessions, one per trace (docs/OTEL.md).",
    )
    def post(self, request):
        try:
            message = decode.decode(
                request.body,
                content_type=request.META.get("CONTENT_TYPE"),
                content_encoding=request.META.get("HTTP_CONTENT_ENCODING"),
                max_bytes=settings.RMS_OTLP_MAX_BYTES,
                max_spans=settings.RMS_OTLP_MAX_SPANS,
            )
        except decode.OtlpError as exc:
            return self._error(request, exc.status, exc.code, exc.message)
        receipt = services.spans_receive(client=request.auth, message=message)
        media = _media(request)
        return HttpResponse(
            decode.encode_response(media, receipt.rejected_count, receipt.message()),
            status=200,
            content_type=media,
        )

    def _error(self, request, status: int, code: str, message: str) -> HttpResponse:
        media = _media(request)
        if media == decode.PROTOBUF:
            body = decode.encode_status(status, message)
        else:
            body = json.dumps(error_body(code, message)).encode()
        return HttpResponse(body, status=status, content_type=media)

    def finalize_response(self, request, response, *args, **kwargs):
        """Errors raised before or around ``post`` (authentication, role, throttle, database)
        were rendered as contract JSON: a protobuf request gets them as a google.rpc.Status,
        with the same status and headers (WWW-Authenticate, Retry-After)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code < 400 or _media(request) != decode.PROTOBUF:
            return response
        data = getattr(response, "data", None)
        if not isinstance(data, dict) or "error" not in data:
            return response
        out = HttpResponse(
            decode.encode_status(response.status_code, str(data["error"].get("message", ""))),
            status=response.status_code,
            content_type=decode.PROTOBUF,
        )
        for header in ("WWW-Authenticate", "Retry-After"):
            if header in response:
                out[header] = response[header]
        return out
