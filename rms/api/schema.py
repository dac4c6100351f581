"""OpenAPI extensions for drf-spectacular: our token scheme, strict number fields, and the error
responses every operation shares (so the document lists every status an operation can answer)."""

from __future__ import annotations

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema as BaseAutoSchema
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from rms.api.openapi import error

WRITE_METHODS = ("POST", "PUT", "PATCH")
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer"},
        "description": "Seconds to wait before trying again.",
    }
}


class AutoSchema(BaseAutoSchema):
    """Adds the shared error answers, in the contract's error shape, to every operation:

    - 400 when the operation takes a body or query parameters (validation, malformed JSON);
    - 401, 403 and 429 when it needs a token (no/bad token, role or namespace, throttled);
    - 404 when its path has parameters (unknown or invisible id, malformed id) or it reads a
      required ``?namespace=``;
    - 413 and 415 when it takes a body (too large, not JSON);
    - 503 always (database outage; `Retry-After`).

    A view declares the others it can give (409...) in ``extend_schema(responses=...)``; one it
    declares itself is kept as written.
    """

    def error_statuses(self) -> dict[int, str]:
        statuses: dict[int, str] = {}
        has_body = self.method in WRITE_METHODS
        query = [
            p
            for p in self.get_override_parameters()
            if isinstance(p, OpenApiParameter) and p.location == OpenApiParameter.QUERY
        ]
        has_query = bool(query)
        # ?namespace= names a resource: an unknown one is a 404 like an unknown id in the path.
        names_resource = any(p.name == "namespace" and p.required for p in query)
        if has_body or has_query:
            statuses[400] = "Invalid input: `fields` says which."
        if self.view.authentication_classes:
            statuses[401] = "No token or a bad token (`WWW-Authenticate: Token`)."
            statuses[403] = "The caller's role or namespaces do not allow this call."
        if "{" in self.path or names_resource:
            statuses[404] = "No such resource, not visible to the caller, or a malformed id."
        if has_body:
            statuses[413] = "The request body is too large."
            statuses[415] = "The body is not JSON."
        if self.view.authentication_classes and self.view.throttle_classes:
            statuses[429] = "Throttled: retry after `Retry-After` seconds."
        statuses[503] = "A dependency (the database) is down: retry after `Retry-After` seconds."
        return statuses

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code, description in self.error_statuses().items():
            key = str(code)
            if key not in responses:
                responses[key] = self._get_response_for_code(error(description), key)
            if code in (429, 503):
                responses[key].setdefault("headers", {}).update(RETRY_AFTER)
        return dict(sorted(responses.items()))


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "rms.api.auth.ApiTokenAuthentication"
    name = "TokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>` (or `Bearer <key>`), the key from "
            "`manage.py create_api_client`.",
        }


class FiniteFloatFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "rms.api.serializers.FiniteFloatField"

    def map_serializer_field(self, auto_schema, direction):
        schema = build_basic_type(OpenApiTypes.DOUBLE)
        if self.target.min_value is not None:
            schema["minimum"] = self.target.min_value
        if self.target.max_value is not None:
            schema["maximum"] = self.target.max_value
        return schema
