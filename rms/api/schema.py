"""OpenAPI extensions for drf-spectacular: our token scheme and strict number fields."""

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.plumbing import build_basic_type
from drf_spectacular.types import OpenApiTypes


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "rms.api.auth.ApiTokenAuthentication"
    name = "TokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>`, from `manage.py create_api_client`.",
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
