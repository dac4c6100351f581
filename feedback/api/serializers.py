"""Input serializers of the feedback API (API.md bodies)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema_serializer
from rest_framework import serializers

from analysis import api as detection
from feedback.utility import OUTCOMES
from rms import policy
from rms.api.serializers import (
    FiniteFloatField,
    StrictBooleanField,
    StrictCharField,
    StrictDateTimeField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    choice,
    tag_list,
)

MAX_ENTRIES = 1000
MAX_INT = 2_147_483_647  # the columns are 32-bit integers


class InjectionIn(StrictSerializer):
    object_id = StrictUUIDField()
    rank_position = StrictIntegerField(
        min_value=1, max_value=MAX_INT, required=False, allow_null=True
    )
    representation_type = StrictCharField(max_length=50, required=False, allow_blank=True)
    token_cost = StrictIntegerField(min_value=1, max_value=MAX_INT)
    composite_score = FiniteFloatField(required=False, allow_null=True)
    str_value = FiniteFloatField(required=False, allow_null=True)


class SessionSignalIn(StrictSerializer):
    object_id = StrictUUIDField()
    signal_type = choice(policy.SIGNAL_TYPES)
    detection_method = choice(policy.DETECTION_METHODS, required=False)
    actor_id = StrictCharField(max_length=200, required=False)
    actor_type = choice(policy.ACTOR_TYPES, required=False)
    evidence_ids = tag_list()


#: The body API.md shows: the document's example, in place of numbers made up from the bounds.
SESSION_EXAMPLE = {
    "session_id": "s-1",
    "request_id": "r-1",
    "namespace_scope": ["support"],
    "context_budget": 4096,
    "tokens_used": 1840,
    "context_text": "what stack does Alice use",
    "context_tags": ["alice"],
    "outcome": "SUCCESS",
    "injections": [
        {
            "object_id": "3f1c2a9e-8d4b-4c7a-9e21-5b6d7c8e9f01",
            "rank_position": 1,
            "representation_type": "STRUCTURED",
            "token_cost": 48,
            "composite_score": 0.73,
        }
    ],
    "signals": [
        {
            "object_id": "3f1c2a9e-8d4b-4c7a-9e21-5b6d7c8e9f01",
            "signal_type": policy.REFERENCED,
            "detection_method": "response_analysis",
            "actor_id": "analyser",
            "actor_type": "SYSTEM_PROCESS",
        }
    ],
}


@extend_schema_serializer(
    examples=[OpenApiExample("A session", value=SESSION_EXAMPLE, request_only=True)]
)
class SessionIn(StrictSerializer):
    session_id = StrictCharField(max_length=200)
    request_id = StrictCharField(max_length=200)
    namespace_scope = serializers.ListField(
        child=StrictCharField(max_length=100), min_length=1, max_length=50
    )
    context_budget = StrictIntegerField(min_value=0, max_value=MAX_INT)
    tokens_used = StrictIntegerField(min_value=0, max_value=MAX_INT)
    context_text = StrictCharField(required=False, allow_blank=True, max_length=100_000)
    context_tags = tag_list()
    outcome = choice(OUTCOMES, required=False, allow_null=True)
    ts = StrictDateTimeField(required=False)
    injections = serializers.ListField(child=InjectionIn(), max_length=MAX_ENTRIES, required=False)
    signals = serializers.ListField(child=SessionSignalIn(), max_length=MAX_ENTRIES, required=False)
    response_text = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=200_000,
        help_text=f"With detect: at most {detection.MAX_RESPONSE_CHARS} characters (longer: 413).",
    )
    detect = StrictBooleanField(
        required=False,
        help_text="Analyse response_text for the injected objects without an explicit signal "
        f"(at most {detection.MAX_OBJECTS} of them, more: 400).",
    )

    def validate(self, attrs):
        if attrs.get("detect") and not attrs.get("response_text"):
            raise serializers.ValidationError(
                {"response_text": ["Required (non-empty) when detect is true."]}
            )
        attrs.setdefault("injections", [])
        attrs.setdefault("signals", [])
        attrs["namespace_scope"] = list(dict.fromkeys(attrs["namespace_scope"]))
        return attrs


class RankCandidateIn(StrictSerializer):
    object_id = StrictUUIDField()
    similarity = FiniteFloatField(min_value=0.0, max_value=1.0)


class RankIn(StrictSerializer):
    namespace = StrictCharField(max_length=100)
    candidates = serializers.ListField(child=RankCandidateIn(), min_length=1, max_length=1000)
    now = serializers.DateTimeField(
        required=False,
        help_text="The clock decay and hotness are computed at (default: the server's clock).",
    )


class DetectIn(StrictSerializer):
    # Its length bound is the analysis' own (413, ``feedback.services.check_analysis``).
    response_text = StrictCharField(
        help_text=f"At most {detection.MAX_RESPONSE_CHARS} characters (longer: 413)."
    )
    object_ids = serializers.ListField(
        child=StrictUUIDField(), min_length=1, max_length=detection.MAX_OBJECTS
    )


class TaskIn(StrictSerializer):
    """The kind and its params are checked by ``taskruns`` (role first, then params)."""

    kind = StrictCharField(max_length=40)
    params = serializers.JSONField(required=False, default=dict)
