"""Webhook endpoints and deliveries (API.md "The closed loop"): admins only; thin views."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from delivery import selectors, services
from delivery.api import openapi, serializers
from delivery.models import WebhookDelivery
from rms import events
from rms.api import openapi as core_openapi
from rms.api import pagination
from rms.api.base import APIView
from rms.api.inputs import validated
from rms.api.permissions import ADMIN

ADMIN_ONLY = {"*": (ADMIN,)}


def _object_body(request) -> dict:
    if not isinstance(request.data, dict):
        raise ValidationError({"non_field_errors": ["Expected a JSON object."]})
    return request.data


class WebhookListView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(operation_id="webhooks_list", responses={200: openapi.WebhookList})
    def get(self, request):
        rows = [selectors.endpoint_out(e) for e in selectors.endpoints_with_stats()]
        return Response({"results": rows, "next": None})

    @extend_schema(
        operation_id="webhooks_create",
        request=serializers.WebhookIn,
        responses={201: openapi.WebhookCreated},
        description="Register an endpoint; the answer carries its secret, shown only here.",
    )
    def post(self, request):
        data = validated(serializers.WebhookIn, _object_body(request))
        endpoint, secret = services.endpoint_create(created_by=request.auth.name, **data)
        return Response({**selectors.endpoint_out(endpoint), "secret": secret}, status=201)


class WebhookDetailView(APIView):
    roles = ADMIN_ONLY

    def _one(self, webhook_id):
        endpoint = services.get_endpoint(webhook_id)
        return selectors.endpoints_with_stats().get(pk=endpoint.pk)

    @extend_schema(operation_id="webhooks_retrieve", responses={200: openapi.WebhookOut})
    def get(self, request, webhook_id):
        return Response(selectors.endpoint_out(self._one(webhook_id)))

    @extend_schema(
        operation_id="webhooks_update",
        request=serializers.WebhookPatch,
        responses={200: openapi.WebhookOut},
        description="Change an endpoint; `state: active` re-enables it at the head of the log.",
    )
    def patch(self, request, webhook_id):
        data = validated(serializers.WebhookPatch, _object_body(request))
        endpoint = services.endpoint_update(endpoint_id=webhook_id, data=data)
        return Response(selectors.endpoint_out(self._one(endpoint.pk)))

    @extend_schema(operation_id="webhooks_destroy", responses={204: None})
    def delete(self, request, webhook_id):
        services.endpoint_delete(endpoint_id=webhook_id)
        return Response(status=204)


class WebhookRotateView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="webhooks_rotate_secret", request=None, responses={200: openapi.SecretOut}
    )
    def post(self, request, webhook_id):
        return Response({"secret": services.endpoint_rotate_secret(endpoint_id=webhook_id)})


class WebhookTestView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="webhooks_test",
        request=None,
        responses={
            202: openapi.DeliveryOut,
            409: core_openapi.error("The endpoint is disabled."),
        },
    )
    def post(self, request, webhook_id):
        delivery = services.endpoint_test(endpoint_id=webhook_id)
        return Response(selectors.delivery_out(delivery), status=202)


class DeliveryListView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="webhooks_deliveries",
        parameters=[
            core_openapi.query("state", enum=list(WebhookDelivery.STATES)),
            core_openapi.query("event_type", enum=list(events.EVENT_TYPES)),
            core_openapi.CURSOR,
            core_openapi.PAGE_SIZE,
        ],
        responses={200: openapi.DeliveryList},
        description="The delivery log, newest first.",
    )
    def get(self, request, webhook_id):
        endpoint = services.get_endpoint(webhook_id)
        state = request.query_params.get("state") or None
        if state is not None and state not in WebhookDelivery.STATES:
            raise ValidationError({"state": ["Must be pending, succeeded or failed."]})
        event_type = request.query_params.get("event_type") or None
        if event_type is not None and event_type not in events.EVENT_TYPES:
            raise ValidationError({"event_type": ["Unknown event type."]})
        qs = selectors.deliveries(endpoint=endpoint, state=state, event_type=event_type)
        rows, next_url = pagination.created_at_page(request, qs, newest_first=True)
        return Response({"results": [selectors.delivery_out(d) for d in rows], "next": next_url})


class DeliveryRetryView(APIView):
    roles = ADMIN_ONLY

    @extend_schema(
        operation_id="webhooks_delivery_retry",
        request=None,
        responses={
            202: openapi.DeliveryOut,
            409: OpenApiResponse(
                core_openapi.Error, description="Already delivered, or the endpoint is disabled."
            ),
        },
    )
    def post(self, request, webhook_id, delivery_id):
        delivery = services.delivery_retry(endpoint_id=webhook_id, delivery_id=delivery_id)
        return Response(selectors.delivery_out(delivery), status=202)
