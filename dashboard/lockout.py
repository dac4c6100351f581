"""The page a locked-out login gets (django-axes calls this instead of its plain-text answer)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials=None
) -> HttpResponse:
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    return render(
        request,
        "registration/locked_out.html",
        {"minutes": minutes, "login_url": settings.LOGIN_URL},
        status=429,
    )


def client_address(request: HttpRequest) -> str | None:
    """The address login failures are counted for. Each trusted proxy appends the address it
    received the request from to ``X-Forwarded-For``, so the client is the entry that many
    places from the right; anything further left was written by the client itself."""
    proxies = settings.RMS_TRUSTED_PROXIES
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if proxies and len(forwarded) >= proxies and forwarded[-proxies]:
        return forwarded[-proxies]
    return request.META.get("REMOTE_ADDR")
