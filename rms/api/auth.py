"""Token authentication against hashed API-client tokens (API.md)."""

from __future__ import annotations

import hashlib
import secrets

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from rms.models import ApiClient

KEYWORD = "Token"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Token <key>``; sets ``request.auth`` to the ApiClient."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Invalid token header.")
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
