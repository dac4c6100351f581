"""Core API views (API.md): thin — validate, call one service or selector, render."""

from __future__ import annotations

import ipaddress
from datetime import datetime

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.response import Response

from rms import extensions, gcpause, health, selectors, services, telemetry
from rms.api import openapi, pagination, serializers
from rms.api.base import APIView
from rms.api.inputs import validated
from rms.api.params import parse_time_param, parse_uuid
from rms.api.permissions import ADMIN, ANY_ROLE, OPERATOR, WRITERS
from rms.errors import NotFound

MAX_OBJECTS_PER_POST = 1000


class HealthView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    @extend_schema(
        operation_id="health",
        responses={200: openapi.HealthOut, 503: openapi.HealthOut},
        description="Liveness of the service and its dependencies: 503 naming what is down "
        "(`unavailable`); `worker` reports the workers' last heartbeat.",
    )
    def get(self, request):
        """Answers within about a second whatever is down (rms.health's deadline)."""
        checks = {**health.CHECKS, **extensions.health_extras()}
        results = health.run_checks(checks)
        down = [name for name in health.CHECKS if results[name] != health.OK]
        body = {
            "status": "degraded" if down else "ok",
            **{name: results[name] for name in health.CHECKS},
            "unavailable": down,
            **{name: results[name] for name in checks if name not in health.CHECKS},
        }
        return Response(body, status=503 if down else 200)


class NamespaceListView(APIView):
    roles = {"GET": ANY_ROLE, "POST": (ADMIN,)}

    @extend_schema(
        operation_id="namespaces_list",
        responses={200: openapi.NamespaceList},
        description="Namespaces visible to the caller, with their settings.",
    )
    def get(self, request):
        qs = selectors.namespace_list(request.auth)
        return Response({"results": [serializers.namespace_out(ns) for ns in qs], "next": None})

    @extend_schema(
        request=serializers.NamespaceIn,
        responses={201: openapi.NamespaceOut, 409: openapi.error("The namespace exists.")},
    )
    def post(self, request):
        data = validated(serializers.NamespaceIn, request.data)
        ns = services.namespace_create(**data)
        return Response(serializers.namespace_out(ns), status=201)


class NamespaceDetailView(APIView):
    roles = {"GET": ANY_ROLE, "PATCH": (ADMIN,)}

    @extend_schema(
        operation_id="namespaces_detail",
        responses={200: openapi.NamespaceOut},
        description="One namespace's settings.",
    )
    def get(self, request, name: str):
        ns = selectors.namespace_visible(request.auth, name)
        return Response(serializers.namespace_out(ns))

    @extend_schema(
        operation_id="namespaces_update",
        request=serializers.NamespaceUpdateIn,
        responses={200: openapi.NamespaceOut},
        description="Change the namespace's settings (admin): `retention_days` (≥ 1, or null "
        "to keep everything; the beat-driven retention pass archives what is older), the "
        "retrieval `weights` and `retrieval` rules (each replaced whole). A change of the "
        "retrieval profile is the opt-in change event `namespace.profile_changed`.",
    )
    def patch(self, request, name: str):
        data = validated(serializers.NamespaceUpdateIn, request.data)
        ns = services.namespace_update(request.auth, name, data)
        return Response(serializers.namespace_out(ns))


class ObjectListView(APIView):
    roles = {"GET": ANY_ROLE, "POST": WRITERS}

    @extend_schema(
        operation_id="objects_list",
        parameters=[
            openapi.NAMESPACE_FILTER,
            openapi.query("epistemic_type", enum=list(serializers.policy.EPISTEMIC_TYPES)),
            openapi.query("pinned", enum=["true", "false"]),
            *openapi.OBJECT_LIST_FILTERS,
            openapi.CURSOR,
            openapi.PAGE_SIZE,
        ],
        responses={200: openapi.ObjectList},
        description=(
            "Objects visible to the caller. Without `sort` keyset-paginated by creation time; "
            "with one, in that order (ties by id) and paginated by offset. A filter on the "
            "feedback aggregate (usage ratio, in_alert) leaves out objects without one "
            "(never injected), except `in_alert=false`."
        ),
    )
    def get(self, request):
        query, errors = selectors.object_query_of(request.query_params)
        if errors:
            raise ValidationError(errors)
        qs = selectors.object_list(request.auth, query=query)
        if query.default_order:
            rows, next_page = pagination.created_at_page(request, qs)
        else:
            rows, next_page = pagination.offset_page(request, selectors.ordered(qs, query))
        return Response(
            {"results": serializers.objects_out(rows, timezone.now()), "next": next_page}
        )

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="ObjectCreate",
            serializers=[serializers.ObjectIn, serializers.ObjectIn(many=True)],
            resource_type_field_name=None,
            many=False,
        ),
        responses={
            201: PolymorphicProxySerializer(
                component_name="ObjectCreated",
                serializers=[openapi.ObjectOut, openapi.ObjectOut(many=True)],
                resource_type_field_name=None,
                many=False,
            ),
            409: openapi.CONFLICT,
        },
        description="One object or a list of up to 1000; all are created or none.",
    )
    def post(self, request):
        data = request.data
        many = isinstance(data, list)
        if many:
            if not data:
                raise ValidationError({"non_field_errors": ["Send at least one object."]})
            if len(data) > MAX_OBJECTS_PER_POST:
                raise ValidationError(
                    {"non_field_errors": [f"At most {MAX_OBJECTS_PER_POST} objects per request."]}
                )
            ser = serializers.ObjectIn(data=data, many=True)
            ser.is_valid(raise_exception=True)
            items = [dict(item) for item in ser.validated_data]
        elif isinstance(data, dict):
            items = [validated(serializers.ObjectIn, data)]
        else:
            raise ValidationError({"non_field_errors": ["Send an object or a list of objects."]})
        objects = services.object_create(client=request.auth, items=items)
        out = serializers.objects_out(objects, timezone.now())
        return Response(out if many else out[0], status=201)


class ObjectDetailView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="objects_detail",
        responses={200: openapi.ObjectOut},
        description="An object's state, `salience_effective` now, and its `aggregate`.",
    )
    def get(self, request, object_id: str):
        obj = selectors.visible_object(request.auth, parse_uuid(object_id))
        return Response(serializers.objects_out([obj], timezone.now())[0])


class ObjectStateView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="objects_state_as_of",
        parameters=[openapi.time_param("as_of", "The time to replay to.", required=True)],
        responses={200: openapi.ObjectStateOut},
        description="The object's state after the last operation with ts ≤ `as_of`.",
    )
    def get(self, request, object_id: str):
        obj = selectors.visible_object(request.auth, parse_uuid(object_id))
        as_of = parse_time_param(request, "as_of", required=True)
        op, version = selectors.object_state_as_of(obj, as_of)
        return Response(serializers.state_as_of_out(obj, op, as_of, version))


class ObjectExplainView(APIView):
    roles = {"GET": ANY_ROLE}

    def dispatch(self, request, *args, **kwargs):
        # A long chain's answer is tens of thousands of small acyclic dicts; with the
        # collector on, its passes over them (and a whole-heap pass every few requests) were a
        # third of the request's CPU (see rms.gcpause). Rendered inside the pause and then
        # dropped (the bytes are what is sent), they are freed before the collector is back.
        with gcpause.paused():
            response = super().dispatch(request, *args, **kwargs)
            if callable(getattr(response, "render", None)):
                response.render()
                response.data = None
        return response

    @extend_schema(
        operation_id="objects_explain",
        parameters=[openapi.time_param("as_of", "Explain the values at this time (default: now).")],
        responses={200: openapi.ExplainOut},
        description="Why the object's confidence, salience_base and effective salience are what "
        "they are: the value at creation (`start`), then each operation that moved it, with "
        "the signal, actor, session, the weight (γ or δ) asked and applied and each control "
        "that cut it (reliability discount, correlation discount, repeat diminishing, session "
        "cap, ceiling, floor), and for effective salience the read-time decay between them. "
        "Steps chain (`after` of one is `before` of the next) from `start` to `final`, and "
        "`final` is the object's value at `as_of`. 404 when `as_of` is before the object "
        "existed.",
    )
    def get(self, request, object_id: str):
        obj = selectors.visible_object(request.auth, parse_uuid(object_id))
        as_of = parse_time_param(request, "as_of") or timezone.now()
        answer = selectors.object_explanation(obj, as_of)
        if answer is None:
            raise NotFound("The object did not exist at that time.")
        return Response(answer)


class ObjectOperationsView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="objects_operations",
        parameters=[openapi.CURSOR, openapi.PAGE_SIZE],
        responses={200: openapi.OperationList},
        description="The object's operation chain, oldest first.",
    )
    def get(self, request, object_id: str):
        obj = selectors.visible_object(request.auth, parse_uuid(object_id))
        size = pagination.page_size(request)
        cursor = pagination.decode_cursor(request)
        after = _operation_cursor(cursor) if cursor is not None else None
        rows, more = selectors.operations_page(obj, after=after, size=size)
        last = rows[-1] if more else None
        next_cursor = (
            pagination.encode_cursor([last.seq, last.ts.isoformat()]) if last is not None else None
        )
        return Response(
            {
                "results": [serializers.operation_out(op) for op in rows],
                "next": pagination.next_url(request, next_cursor),
            }
        )


def _operation_cursor(cursor: list) -> tuple[int, datetime | None]:
    """(seq, ts) of an operations cursor ``[seq, ts]``, or (seq, None) for ``[seq]`` (from
    before ``ts`` was added); 400 for anything else."""
    if not cursor or len(cursor) > 2:
        raise pagination.invalid_cursor()
    seq = pagination.cursor_int(cursor[0], pagination.MAX_SEQ)
    if len(cursor) == 1:
        return seq, None
    return seq, pagination.cursor_time(cursor[1])


class _ObjectChangeView(APIView):
    serializer_class: type = serializers.ReasonIn

    def change(self, request, object_id, data: dict):  # pragma: no cover - abstract
        raise NotImplementedError

    def post(self, request, object_id: str):
        """Returns the object after the change; each change is one operation on its chain."""
        data = validated(self.serializer_class, request.data)
        obj = self.change(request, parse_uuid(object_id), data)
        return Response(serializers.objects_out([obj], timezone.now())[0])


class ObjectPinView(_ObjectChangeView):
    roles = {"POST": (ADMIN,)}
    serializer_class = serializers.PinIn

    @extend_schema(
        request=serializers.PinIn, responses={200: openapi.ObjectOut, 409: openapi.CONFLICT}
    )
    def post(self, request, object_id: str):
        return super().post(request, object_id)

    def change(self, request, object_id, data):
        return services.object_pin(client=request.auth, object_id=object_id, **data)


class ObjectUnpinView(_ObjectChangeView):
    roles = {"POST": (ADMIN,)}

    @extend_schema(
        request=serializers.ReasonIn, responses={200: openapi.ObjectOut, 409: openapi.CONFLICT}
    )
    def post(self, request, object_id: str):
        return super().post(request, object_id)

    def change(self, request, object_id, data):
        return services.object_unpin(client=request.auth, object_id=object_id, **data)


class ObjectTransitionView(_ObjectChangeView):
    roles = {"POST": (ADMIN,)}
    serializer_class = serializers.TransitionIn

    @extend_schema(
        request=serializers.TransitionIn, responses={200: openapi.ObjectOut, 409: openapi.CONFLICT}
    )
    def post(self, request, object_id: str):
        return super().post(request, object_id)

    def change(self, request, object_id, data):
        return services.object_transition(client=request.auth, object_id=object_id, **data)


class ObjectConditionView(_ObjectChangeView):
    roles = {"POST": WRITERS}
    serializer_class = serializers.ConditionIn

    @extend_schema(
        request=serializers.ConditionIn, responses={200: openapi.ObjectOut, 409: openapi.CONFLICT}
    )
    def post(self, request, object_id: str):
        return super().post(request, object_id)

    def change(self, request, object_id, data):
        return services.object_condition(client=request.auth, object_id=object_id, **data)


class MetricsReader(BasePermission):
    """An operator or admin token, or any caller from ``RMS_METRICS_ALLOW_IPS``."""

    message = "Only operators and admins may read the metrics."

    def has_permission(self, request, view) -> bool:
        client = request.auth
        if client is not None:
            return client.role in (OPERATOR, ADMIN)
        try:
            address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
        except ValueError:
            return False
        return any(address in net for net in settings.RMS_METRICS_ALLOW_IPS)


class FixedContentNegotiation(BaseContentNegotiation):
    """Ignores ``Accept``: the view's answer has one format whatever a scraper asks for (a
    Prometheus scraper or ``curl -H 'Accept: text/plain'`` would otherwise be refused with 406 by
    the JSON-only renderers), and its errors are the contract's JSON."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class PrometheusView(APIView):
    """``GET /metrics``: the Prometheus text exposition (``rms.telemetry``)."""

    permission_classes = [MetricsReader]
    throttle_classes: list = []
    content_negotiation_class = FixedContentNegotiation

    @extend_schema(exclude=True)  # operational, outside the API contract
    def get(self, request):
        return HttpResponse(telemetry.exposition(), content_type=telemetry.CONTENT_TYPE)
