"""Roles (API.md): client, operator, admin. Views declare ``roles`` per HTTP method."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from rms.models import ApiClient

CLIENT, OPERATOR, ADMIN = ApiClient.ROLES
ANY_ROLE = (CLIENT, OPERATOR, ADMIN)
WRITERS = (CLIENT, ADMIN)


class IsApiClient(BasePermission):
    """Authenticated by token, and the role is allowed for this method by ``view.roles``."""

    message = "Your role does not allow this call."

    def has_permission(self, request, view) -> bool:
        client = request.auth
        if not isinstance(client, ApiClient):
            return False
        roles = getattr(view, "roles", {}).get(request.method)
        if roles is None:
            roles = getattr(view, "roles", {}).get("*", ANY_ROLE)
        return client.role in roles
