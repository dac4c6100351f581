"""Input serializers (validation only) and output builders for the core API (API.md)."""

from __future__ import annotations

import math
import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from rms import policy, retrieval_rules
from rms.api import parsers
from rms.errors import unknown_fields
from rms.representations import (  # noqa: F401 - the API's output shapes, re-exported
    namespace_out,
    object_out,
    objects_out,
    operation_out,
    state_as_of_out,
)

# --- input --------------------------------------------------------------------------------------


class FiniteFloatField(serializers.Field):
    """A JSON number that is finite; strings, booleans, NaN and infinities are refused."""

    default_error_messages = {
        "invalid": "A finite number is required.",
        "min_value": "Ensure this value is greater than or equal to {min_value}.",
        "max_value": "Ensure this value is less than or equal to {max_value}.",
    }

    def __init__(self, *, min_value: float | None = None, max_value: float | None = None, **kw):
        super().__init__(**kw)
        self.min_value = min_value
        self.max_value = max_value

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        value = float(data)
        if not math.isfinite(value):
            self.fail("invalid")
        if self.min_value is not None and value < self.min_value:
            self.fail("min_value", min_value=self.min_value)
        if self.max_value is not None and value > self.max_value:
            self.fail("max_value", max_value=self.max_value)
        return value

    def to_representation(self, value):
        return value


class StrictIntegerField(serializers.IntegerField):
    """An integer given as a JSON number (not "12", not true)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(int(data))


class _StringsOnly:
    """DRF's CharField turns a number into its text (1e400 became "inf"); only strings here."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictCharField(_StringsOnly, serializers.CharField):
    pass


class StrictSlugField(_StringsOnly, serializers.SlugField):
    pass


class StrictUUIDField(serializers.UUIDField):
    """A UUID given as a string (DRF also takes an integer, or ``true`` as UUID 1)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.UUID)
class UUIDTextField(StrictCharField):
    """A string that must spell a UUID, kept as sent (an idempotency key compared as text)."""

    default_error_messages = {"invalid_uuid": "Must be a valid UUID."}

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            uuid.UUID(value)
        except ValueError:
            self.fail("invalid_uuid")
        return value


class StrictBooleanField(serializers.BooleanField):
    """true or false, not "yes" or 1."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictDateTimeField(serializers.DateTimeField):
    """An ISO 8601 time stored in UTC; an offset of 16 h or more is refused (PostgreSQL's
    range), and so is a time that leaves years 1–9999 once in UTC (DRF's own check)."""

    default_error_messages = {"offset": "The UTC offset must be less than 16 hours."}

    def enforce_timezone(self, value):
        offset = value.utcoffset() if value.tzinfo is not None else None
        if offset is not None and abs(offset) >= parsers.MAX_UTC_OFFSET:
            self.fail("offset")
        return super().enforce_timezone(value)


class StrictSerializer(serializers.Serializer):
    """Unknown fields are a 400, so a misspelt optional field is never silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict) and (unknown := unknown_fields(data, self.fields)):
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


def choice(values, **kw) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=list(values), **kw)


def tag_list(**kw) -> serializers.ListField:
    return serializers.ListField(
        child=StrictCharField(max_length=200), max_length=200, required=False, **kw
    )


class ObjectIn(StrictSerializer):
    id = StrictUUIDField(required=False)
    namespace = StrictCharField(max_length=100)
    content = StrictCharField(max_length=50_000)
    domain_tags = tag_list()
    epistemic_type = choice(policy.EPISTEMIC_TYPES)
    condition_state = choice(policy.CONDITION_STATES, required=False, allow_null=True)
    decay_profile = choice(policy.DECAY_PROFILES, required=False)
    confidence = FiniteFloatField(min_value=0.0, max_value=1.0, required=False)
    salience_base = FiniteFloatField(min_value=0.0, max_value=1.0, required=False)
    evidence_ids = tag_list()
    actor_id = StrictCharField(max_length=200, required=False)
    actor_type = choice(policy.ACTOR_TYPES, required=False)
    ts = StrictDateTimeField(required=False)


class SignalIn(StrictSerializer):
    signal_type = choice(policy.SIGNAL_TYPES)
    session_id = StrictCharField(max_length=200)
    actor_id = StrictCharField(max_length=200, required=False)
    actor_type = choice(policy.ACTOR_TYPES, required=False)
    detection_method = choice(policy.DETECTION_METHODS, required=False)
    evidence_ids = tag_list()
    request_id = UUIDTextField(max_length=200, required=False)
    ts = StrictDateTimeField(required=False)


class ReasonIn(StrictSerializer):
    reason = StrictCharField(max_length=2000)
    ts = StrictDateTimeField(required=False)


class PinIn(ReasonIn):
    confidence = FiniteFloatField(min_value=0.0, max_value=1.0, required=False, allow_null=True)


class TransitionIn(ReasonIn):
    to = choice(policy.EPISTEMIC_TYPES)


class ConditionIn(StrictSerializer):
    condition_state = choice(policy.CONDITION_STATES)
    ts = StrictDateTimeField(required=False)


#: The metrics a namespace may set an alert threshold for: feedback.metrics.ALERT_METRIC_NAMES
#: (pinned equal by a test; rms does not import feedback).
METRIC_NAMES = (
    "mean_usage_ratio",
    "high_correction_rate",
    "budget_waste_ratio",
    "unused_injection_rate",
    "retrieval_hit_rate",
    "retrieval_precision_at_1",
)


class RetrievalRulesIn(StrictSerializer):
    """The retrieval profile's eligibility rules (SPEC §12; DEPRECATED is never eligible)."""

    confidence_floor = FiniteFloatField(min_value=0.0, max_value=1.0, required=False)
    conditions = serializers.ChoiceField(choices=retrieval_rules.CONDITIONS, required=False)


class NamespaceIn(StrictSerializer):
    name = StrictSlugField(max_length=100)
    ignore_threshold = StrictIntegerField(min_value=1, max_value=10_000, required=False)
    relevance_threshold = FiniteFloatField(min_value=0.0, max_value=1.0, required=False)
    alert_thresholds = serializers.DictField(
        child=FiniteFloatField(min_value=0.0, max_value=1.0), required=False
    )
    weights = serializers.DictField(
        child=FiniteFloatField(min_value=0.0, max_value=1.0), required=False
    )
    retrieval = RetrievalRulesIn(required=False)
    retention_days = StrictIntegerField(
        min_value=1, max_value=36_500, required=False, allow_null=True
    )

    def validate_alert_thresholds(self, value: dict) -> dict:
        unknown = sorted(set(value) - set(METRIC_NAMES))
        if unknown:
            raise serializers.ValidationError(f"Unknown metrics: {', '.join(unknown)}.")
        return value

    def validate_weights(self, value: dict) -> dict:
        unknown = sorted(set(value) - set(retrieval_rules.WEIGHT_NAMES))
        if unknown:
            raise serializers.ValidationError(f"Unknown weights: {', '.join(unknown)}.")
        return value


class NamespaceUpdateIn(StrictSerializer):
    """PATCH /namespaces/{name}: any of the retention period (days; null keeps everything),
    the retrieval ``weights`` and the retrieval rules; each given one replaces what was set."""

    retention_days = StrictIntegerField(
        min_value=1, max_value=36_500, allow_null=True, required=False
    )
    weights = serializers.DictField(
        child=FiniteFloatField(min_value=0.0, max_value=1.0), required=False
    )
    retrieval = RetrievalRulesIn(required=False)

    validate_weights = NamespaceIn.validate_weights

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError("Give retention_days, weights or retrieval.")
        return attrs


# --- output -------------------------------------------------------------------------------------
