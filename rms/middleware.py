"""Refuse oversized bodies before anything reads them (API.md: 413).

DRF parses ``request.stream`` directly and so bypasses Django's DATA_UPLOAD_MAX_MEMORY_SIZE check;
this middleware applies that limit to every request from its Content-Length.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.http import JsonResponse

from rms import telemetry


class RequestTooLargeMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit:
            return JsonResponse(
                {
                    "error": {
                        "code": "request_too_large",
                        "message": f"The request body is larger than {limit} bytes.",
                    }
                },
                status=413,
            )
        return self.get_response(request)


class RequestMetricsMiddleware:
    """``rms_http_request_duration_seconds{endpoint, method, status}`` for every request; the
    endpoint is the route's name (bounded: never the raw path), ``unmatched`` without one."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        endpoint = (match.view_name or "unnamed") if match is not None else "unmatched"
        telemetry.REQUEST_LATENCY.labels(
            endpoint, request.method, str(response.status_code)
        ).observe(time.perf_counter() - started)
        return response
