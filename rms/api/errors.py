"""Every error in the contract's shape: {"error": {"code", "message", "fields"?}} (API.md)."""

from __future__ import annotations

import contextlib
import logging
import sys

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError, connection
from django.http import Http404, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.common import no_append_slash
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.response import Response

from rms import telemetry
from rms.errors import DomainError
from rms.policy import PolicyError

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    error: dict = {"code": code, "message": message}
    if fields:
        error["fields"] = fields
    return {"error": error}


def flatten_fields(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as {"field": [...], "0.field": [...], "injections.2.x": [...]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "non_field_errors" if key == "non_field_errors" and not prefix else str(key)
            out.update(flatten_fields(value, f"{prefix}{name}."))
    elif isinstance(detail, list):
        if all(not isinstance(v, dict | list) for v in detail):
            out[prefix.rstrip(".") or "non_field_errors"] = [str(v) for v in detail]
        else:
            for i, value in enumerate(detail):
                if value:
                    out.update(flatten_fields(value, f"{prefix}{i}."))
    else:
        out[prefix.rstrip(".") or "non_field_errors"] = [str(detail)]
    return out


_SIMPLE = {
    drf.ParseError: ("malformed_json", 400),
    drf.NotAuthenticated: ("not_authenticated", 401),
    drf.AuthenticationFailed: ("authentication_failed", 401),
    drf.PermissionDenied: ("forbidden", 403),
    drf.NotFound: ("not_found", 404),
    drf.MethodNotAllowed: ("method_not_allowed", 405),
    drf.NotAcceptable: ("not_acceptable", 406),
    drf.UnsupportedMediaType: ("unsupported_media_type", 415),
    drf.Throttled: ("throttled", 429),
}


#: Seconds a client is asked to wait after a 503 (a database restart takes a few seconds).
RETRY_AFTER_SECONDS = 5


def database_unavailable(exc: BaseException) -> bool:
    """The database could not be reached or dropped the connection (a 503, never a 500).
    Django wraps every driver error in these two classes: OperationalError covers a refused
    or lost connection, a server shutting down, a lock or statement timeout; InterfaceError a
    connection already closed."""
    return isinstance(exc, OperationalError | InterfaceError)


def unavailable_body() -> dict:
    return error_body(
        "service_unavailable", "The database is unavailable; retry after a few seconds."
    )


def _unavailable(exc: BaseException) -> None:
    telemetry.incr(telemetry.DATABASE_UNAVAILABLE)
    logger.warning("database unavailable: %s: %s", type(exc).__name__, exc)
    # the connection the error left behind is unusable: the next request opens a new one
    if not connection.in_atomic_block:
        with contextlib.suppress(Exception):
            connection.close_if_unusable_or_obsolete()


def _not_authenticated_message(request) -> str:
    sent = request.META.get("HTTP_AUTHORIZATION", "") if request is not None else ""
    scheme = sent.split()[0] if sent.split() else ""
    if scheme:
        return (
            f"The {scheme!r} authorization scheme is not accepted: "
            "send 'Authorization: Token <key>'."
        )
    return "Authentication credentials were not provided: send 'Authorization: Token <key>'."


def exception_handler(exc, context):
    if database_unavailable(exc):
        _unavailable(exc)
        return Response(
            unavailable_body(), status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)}
        )
    if isinstance(exc, DomainError):
        return Response(error_body(exc.code, exc.message, exc.fields), status=exc.status)
    if isinstance(exc, PolicyError):
        fields = {exc.field: [exc.message]} if exc.field else None
        return Response(error_body(exc.code, exc.message, fields), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("request_too_large", "The request body is too large."), 413)
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "Not found."), status=404)
    if isinstance(exc, drf.NotAuthenticated):
        auth_header = getattr(exc, "auth_header", None)
        exc = drf.NotAuthenticated(_not_authenticated_message(context.get("request")))
        exc.auth_header = auth_header
    if isinstance(exc, drf.ValidationError):
        return Response(
            error_body("validation_error", "The request is invalid.", flatten_fields(exc.detail)),
            status=400,
        )
    for cls, (code, status) in _SIMPLE.items():
        if isinstance(exc, cls):
            headers = {}
            if getattr(exc, "auth_header", None):
                headers["WWW-Authenticate"] = exc.auth_header
            if getattr(exc, "wait", None) is not None:
                headers["Retry-After"] = str(int(exc.wait))
            message = str(exc.detail) if not isinstance(exc.detail, dict | list) else code
            return Response(error_body(code, message), status=status, headers=headers)
    if isinstance(exc, drf.APIException):
        return Response(error_body(exc.default_code, str(exc.detail)), status=exc.status_code)
    return None


@csrf_exempt  # a POST to an unknown path is a 404, not a CSRF failure page
@no_append_slash
def api_not_found(request, *args, **kwargs):
    return JsonResponse(error_body("not_found", "Not found."), status=404)


def handler400(request, exception=None):
    """Django's own 400s (a Host not allowed, a suspicious request) are JSON under /api/ too."""
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("bad_request", "The request is malformed."), status=400)
    return defaults.bad_request(request, exception)


def handler403(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("forbidden", "Forbidden."), status=403)
    return defaults.permission_denied(request, exception)


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def handler500(request):
    """Django calls this inside the except block of the uncaught exception: a database outage
    anywhere outside a DRF view (middleware, the dashboard) is a 503 with Retry-After too."""
    exc = sys.exc_info()[1]
    if exc is not None and database_unavailable(exc):
        _unavailable(exc)
        if request.path.startswith("/api/"):
            response = JsonResponse(unavailable_body(), status=503)
        else:
            response = HttpResponse(
                "Service unavailable: the database cannot be reached. Retry in a few seconds.",
                status=503,
                content_type="text/plain; charset=utf-8",
            )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if request.path.startswith("/api/"):
        return JsonResponse(error_body("server_error", "Internal server error."), status=500)
    return defaults.server_error(request)
