"""Who may see and do what on the dashboard (API.md roles, applied to session logins).

A dashboard user's role is the role of their ApiClient; a superuser without one is an admin; any
other account has no dashboard access (403). The role is checked on the server for every view and
every POST, whatever the templates show or hide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.http import Http404

from rms.models import ApiClient, Namespace
from rms.services import Actor

CLIENT, OPERATOR, ADMIN = ApiClient.ROLE_CLIENT, ApiClient.ROLE_OPERATOR, ApiClient.ROLE_ADMIN
ANY_ROLE = (CLIENT, OPERATOR, ADMIN)
OPERATORS = (OPERATOR, ADMIN)
ADMINS = (ADMIN,)
#: The actor type of every action taken through the dashboard: a person clicked it.
HUMAN_USER = "HUMAN_USER"


@dataclass
class Access:
    """The acting client of one request and what it may see."""

    role: str
    client: ApiClient
    actor: Actor

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    @property
    def is_operator(self) -> bool:
        return self.role in OPERATORS

    def namespaces(self):
        """Visible namespaces, by name (one query)."""
        names = self.client.namespace_names()
        qs = Namespace.objects.order_by("name")
        return qs if names is None else qs.filter(name__in=names)

    def can_see(self, namespace_name: str) -> bool:
        return self.client.can_see(namespace_name)


def user_access(user) -> Access | None:
    """The dashboard access of a logged-in user, or None when the account has no role."""
    try:
        client = user.api_client
    except ObjectDoesNotExist:
        client = None
    if client is None:
        if not user.is_superuser:
            return None
        # Services read only name, role and can_see: an unsaved client is enough for them.
        client = ApiClient(name=user.username, role=ADMIN)
    if client.role not in ANY_ROLE:
        return None
    return Access(role=client.role, client=client, actor=Actor(user.username, HUMAN_USER))


def dashboard_view(roles: tuple[str, ...] = ANY_ROLE) -> Callable:
    """Login required (anonymous → login page), then a role in ``roles`` (else 403).

    Sets ``request.access``.
    """

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            access = user_access(request.user)
            if access is None:
                raise PermissionDenied("Your account has no dashboard role.")
            if access.role not in roles:
                raise PermissionDenied(f"The {access.role} role may not do this.")
            request.access = access
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def pick_namespace(namespaces: list[Namespace], name: str | None) -> Namespace | None:
    """From the caller's visible namespaces: the one named ``name`` (404 if it is not among
    them), or without a name the first (None when there is none)."""
    if not name:
        return namespaces[0] if namespaces else None
    for ns in namespaces:
        if ns.name == name:
            return ns
    raise Http404("No such namespace.")
