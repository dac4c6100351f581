"""Template context for every page rendered with a request."""

from __future__ import annotations

from dashboard.permissions import Access, user_access


def dashboard_access(request) -> dict[str, Access | None]:
    """The logged-in user's dashboard access, for the navigation in ``base.html``.

    Dashboard views have set ``request.access`` already; pages rendered outside them (404, 403)
    work it out here, so they keep the navigation a user needs to get back.
    """
    access = getattr(request, "access", None)
    if access is None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            access = user_access(user)
    return {"dashboard_access": access}
