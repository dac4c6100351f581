"""Token authentication against hashed API-client tokens (API.md)."""

from __future__ import annotations

import hashlib
import secrets

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from rms.models import ApiClient

KEYWORD = "Token"
#: Schemes taken for the same key: ``Bearer`` is what most HTTP clients send for an API key.
KEYWORDS = (b"token", b"bearer")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Token <key>`` (or ``Bearer <key>``); sets ``request.auth`` to the
    ApiClient. Another scheme is no credentials (a 401 whose message names the header to send,
    ``rms.api.errors``), so a caller allowed without a token is not refused for it."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Invalid token header: send 'Authorization: Token <key>'.")
        try:
            key = parts[1].decode()
        except UnicodeError as exc:
            raise AuthenticationFailed("Invalid token header.") from exc
        client = (
            ApiClient.objects.select_related("user").filter(token_hash=token_digest(key)).first()
        )
        if client is None or not client.user.is_active:
            raise AuthenticationFailed("Invalid token.")
        return client.user, client

    def authenticate_header(self, request) -> str:
        return KEYWORD
