"""Request framing: NUL characters in the path (404) or query (400), and bodies whatever their
framing, within the size limit (API.md: 413).

DRF parses ``request.stream`` directly and so bypasses Django's DATA_UPLOAD_MAX_MEMORY_SIZE check;
this middleware applies that limit to every request. With a Content-Length it is checked before
anything is read. A body sent with ``Transfer-Encoding: chunked`` has no length: Django would read
it as empty (it reads CONTENT_LENGTH bytes, 0 when absent), so it is read here, at most
limit + 1 bytes, and handed on as a body of known length; the limit holds on the bytes read.
The WSGI server must have decoded the chunks (gunicorn does, and says so with
``wsgi.input_terminated``); one that does not gets 411, never a silently empty body.
"""

from __future__ import annotations

import io
import time

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpResponseBadRequest, HttpResponseNotFound, JsonResponse

from rms import telemetry


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _too_large(limit: int) -> JsonResponse:
    return _error("request_too_large", f"The request body is larger than {limit} bytes.", 413)


def _read_at_most(stream, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class RequestTooLargeMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        meta = request.META
        if "\x00" in request.path:  # no route, name or id holds one
            if request.path.startswith("/api/"):
                return _error("not_found", "Not found.", 404)
            return HttpResponseNotFound("Not found.", content_type="text/plain; charset=utf-8")
        query = meta.get("QUERY_STRING", "")
        if "%00" in query or "\x00" in query:
            # No text column takes a NUL (PostgreSQL refuses it outright): a query parameter
            # holding one is bad input, whatever view would have read it.
            message = "Query parameters may not contain NUL characters."
            if request.path.startswith("/api/"):
                return _error("validation_error", message, 400)
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw_length = meta.get("CONTENT_LENGTH")
        if raw_length:
            try:
                length = int(raw_length)
            except ValueError:
                length = 0
            if limit is not None and length > limit:
                return _too_large(limit)
        elif "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
            if not meta.get("wsgi.input_terminated"):
                return _error(
                    "length_required",
                    "Send a Content-Length (this server cannot read chunks).",
                    411,
                )
            budget = (limit if limit is not None else 2**62) + 1
            body = _read_at_most(meta["wsgi.input"], budget)
            if len(body) >= budget:
                return _too_large(limit)
            meta["CONTENT_LENGTH"] = str(len(body))
            request._stream = LimitedStream(io.BytesIO(body), len(body))
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
