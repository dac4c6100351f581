"""Refuse oversized bodies before anything reads them (API.md: 413).

DRF parses ``request.stream`` directly and so bypasses Django's DATA_UPLOAD_MAX_MEMORY_SIZE check;
this middleware applies that limit to every request from its Content-Length.
"""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse


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
