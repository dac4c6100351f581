"""``GET /api/v1/changes`` (API.md "The closed loop"): the change feed, with a long-poll ``wait``.

Thin: parse, scope to what the caller may read, read pages through ``rms.changes``. The long poll
re-reads every POLL_INTERVAL seconds in autocommit (each read a fresh snapshot, no transaction
held), so a waiting consumer costs one indexed read per interval and holds no lock; but it holds
a request thread, so a poll that would wait takes a slot of ``rms.longpoll`` first (429 when
none is free).
"""

from __future__ import annotations

import json
import time

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import serializers as drf
from rest_framework.exceptions import Throttled, ValidationError

from rms import changes, events, longpoll
from rms.api import openapi
from rms.api.base import APIView
from rms.api.params import namespace_param
from rms.api.permissions import ANY_ROLE

MAX_WAIT = 30.0
#: ``after=now``: start at the head of the log (a consumer that needs no history).
HEAD = "now"
#: Seconds between reads while a long poll waits (commit → consumer latency is about half).
POLL_INTERVAL = 0.1


def _number(request, name: str, low: float, high: float, default: float, *, integer: bool):
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError as exc:
        kind = "an integer" if integer else "a number"
        raise ValidationError({name: [f"Must be {kind}."]}) from exc
    if not low <= value <= high:  # also refuses nan
        raise ValidationError({name: [f"Must be between {low:g} and {high:g}."]})
    return value


def feed_scope(request) -> list[str] | None:
    """The namespaces a caller reads: ``?namespace=`` (403 if not theirs), else all they see."""
    ns = namespace_param(request, required=False)
    if ns is not None:
        return [ns.name]
    names = request.auth.namespace_names()
    return None if names is None else sorted(names)


_EVENT_FIELDS = {
    "id": drf.UUIDField(),
    "cursor": drf.CharField(allow_null=True),
    "type": drf.ChoiceField(choices=events.EVENT_TYPES),
    "ts": drf.DateTimeField(),
    "namespace": drf.CharField(allow_null=True),
    "target_type": drf.ChoiceField(
        choices=["object", "relationship", "namespace"], allow_null=True
    ),
    "target_id": drf.CharField(allow_null=True),
    "op_type": drf.CharField(allow_null=True),
    "data": drf.DictField(),
}


class ChangesView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="changes",
        parameters=[
            openapi.query("namespace", description="One namespace (403 if not yours)."),
            openapi.query(
                "after",
                description="Resume after this cursor (a previous page's `next_cursor`); "
                "omitted: the start of the log; `now`: its head, so only later changes arrive. "
                "A cursor names the deployment that issued it: another deployment's is a 400 "
                "with code `foreign_cursor`.",
                examples=[
                    OpenApiExample("head", value="now"),
                ],
            ),
            openapi.query("types", description="Comma-separated event types."),
            openapi.query(
                "limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
            ),
            openapi.query("wait", {"type": "number", "minimum": 0, "maximum": 30, "default": 0}),
        ],
        responses={
            200: inline_serializer(
                "ChangePage",
                {
                    "results": inline_serializer("ChangeEvent", _EVENT_FIELDS, many=True),
                    "next_cursor": drf.CharField(),
                    "has_more": drf.BooleanField(),
                },
            ),
            400: openapi.error(
                "A malformed cursor or type; a cursor of another deployment is `foreign_cursor`."
            ),
            404: openapi.error("No such namespace."),
            429: openapi.error("Too many polls waiting (with Retry-After)."),
        },
        description="State-changing operations as events, exactly once per consumer.",
    )
    def get(self, request):
        try:
            raw_after = request.query_params.get("after")
            after = changes.head() if raw_after == HEAD else changes.position(raw_after)
            types = events.parse_types(request.query_params.get("types"))
        except events.FeedError as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        limit = _number(request, "limit", 1, events.MAX_LIMIT, events.DEFAULT_LIMIT, integer=True)
        wait = _number(request, "wait", 0, MAX_WAIT, 0.0, integer=False)
        scope = feed_scope(request)
        deadline = time.monotonic() + wait
        page = changes.read(after, limit=limit, namespaces=scope, types=types, as_json=True)
        position = page.next
        if not (page.events or page.has_more) and wait > 0:
            try:
                with longpoll.slot(request.auth.pk, wait):
                    while not (page.events or page.has_more) and time.monotonic() < deadline:
                        time.sleep(min(POLL_INTERVAL, max(0.0, deadline - time.monotonic())))
                        page = changes.read(
                            position, limit=limit, namespaces=scope, types=types, as_json=True
                        )
                        position = page.next
            except longpoll.Refused as exc:
                raise Throttled(
                    wait=longpoll.RETRY_AFTER,
                    detail=f"Too many change-feed polls are waiting ({exc.bound} limit); "
                    "retry later or poll without wait.",
                ) from exc
        # The events arrive as JSON texts (written by PostgreSQL): spliced, not re-encoded.
        body = (
            '{"results":[' + ",".join(page.events) + '],"next_cursor":'
            + json.dumps(changes.cursor(position))
            + ',"has_more":' + ("true" if page.has_more else "false") + "}"
        )  # fmt: skip
        return HttpResponse(body.encode(), content_type="application/json")
