"""The API's view base: DRF's APIView, plus a 400 for a query parameter the operation does not
declare (a misspelt ``page_size`` or a ``window=`` on ``/metrics`` is never silently ignored).

The declared parameters are read from the operation's own OpenAPI annotation
(``extend_schema(parameters=...)``), so the document and the check cannot disagree. An operation
that declares no query parameter is not checked.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import views
from rest_framework.exceptions import ValidationError

_DECLARED: dict[tuple[type, str], frozenset[str]] = {}


def declared_query_parameters(view, method: str) -> frozenset[str]:
    """The query parameter names the view's handler for ``method`` declares (cached per view
    class and method)."""
    key = (type(view), method)
    if key not in _DECLARED:
        handler = getattr(view, method.lower(), None)
        schema_class = getattr(handler, "kwargs", {}).get("schema")
        names: frozenset[str] = frozenset()
        if schema_class is not None:
            schema = schema_class()
            schema.view = view
            schema.method = method
            names = frozenset(
                p.name
                for p in schema.get_override_parameters()
                if isinstance(p, OpenApiParameter) and p.location == OpenApiParameter.QUERY
            )
        _DECLARED[key] = names
    return _DECLARED[key]


class APIView(views.APIView):
    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        declared = declared_query_parameters(self, request.method)
        if declared:
            unknown = sorted(set(request.query_params) - declared)
            if unknown:
                raise ValidationError(
                    {
                        name: [f"Unknown query parameter; this operation takes {_names(declared)}."]
                        for name in unknown
                    }
                )


def _names(declared: frozenset[str]) -> str:
    return ", ".join(sorted(declared))
