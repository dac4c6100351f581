"""The OpenAPI document's shapes: answers and query parameters, for the schema only.

The views build their answers as plain dicts (``serializers.object_out`` & co.); these
serializers are never run, they describe those dicts to drf-spectacular so the published
document is exact. ``tests/rms/test_openapi.py`` validates real answers of every operation
against it, so a field added to an answer and not here (or the reverse) fails a test.

The error responses every operation can give (401, 403, 404, 429, 503...) are added by
``rms.api.schema.AutoSchema``; views declare only the ones specific to them (409...).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from rms import evidence, oplog, policy

# --- errors -------------------------------------------------------------------------------------


class ErrorDetail(serializers.Serializer):
    code = serializers.CharField(help_text="snake_case, stable: branch on it, not on `message`.")
    message = serializers.CharField()
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Validation errors only: field path (`injections.2.token_cost`) → messages.",
    )


class Error(serializers.Serializer):
    """Every error body (API.md)."""

    error = ErrorDetail()


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(Error, description=description)


CONFLICT = error("Conflict: idempotency mismatch, a forbidden transition, or `ts_out_of_order`.")

# --- query parameters ---------------------------------------------------------------------------


def query(name: str, type_=OpenApiTypes.STR, description: str = "", **kw) -> OpenApiParameter:
    return OpenApiParameter(name, type_, OpenApiParameter.QUERY, description=description, **kw)


NAMESPACE = query("namespace", required=True, description="Namespace to read (403 if not yours).")
NAMESPACE_FILTER = query("namespace", description="Only objects of this namespace.")
PAGE_SIZE = query(
    "page_size",
    {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
    "Items per page, 1..1000 (default 100).",
)
CURSOR = query("cursor", description="Opaque cursor from a previous page's `next` URL.")

_UNIT = {"type": "number", "minimum": 0, "maximum": 1}
OBJECT_LIST_FILTERS = [
    query("confidence_min", _UNIT, "Only objects with confidence ≥ this."),
    query("confidence_max", _UNIT, "Only objects with confidence ≤ this."),
    query("usage_ratio_min", _UNIT, "Only objects whose aggregate's usage ratio is ≥ this."),
    query("usage_ratio_max", _UNIT, "Only objects whose aggregate's usage ratio is ≤ this."),
    query(
        "in_alert",
        {"type": "string", "enum": ["true", "false"]},
        "true: only objects in their namespace's review queue (SPEC §8: active, at least 20 "
        "injections, usage ratio below 0.10); false: only objects not in it.",
    ),
    query("q", {"type": "string", "maxLength": 200}, "Case-insensitive text in the content."),
    query(
        "sort",
        {
            "type": "string",
            "enum": [
                f"{sign}{key}"
                for key in (
                    "created_at",
                    "confidence",
                    "usage_ratio",
                    "injections",
                    "last_use",
                    "tokens",
                )
                for sign in ("", "-")
            ],
        },
        "Order of the list; `-` for descending. Default: created_at (keyset pages).",
    ),
]


def time_param(name: str, description: str, *, required: bool = False) -> OpenApiParameter:
    return query(name, OpenApiTypes.DATETIME, description, required=required)


# --- core answers -------------------------------------------------------------------------------

NEXT = serializers.URLField(allow_null=True, help_text="URL of the next page, or null.")


class NamespaceOut(serializers.Serializer):
    name = serializers.CharField()
    ignore_threshold = serializers.IntegerField()
    relevance_threshold = serializers.FloatField()
    alert_thresholds = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Alert thresholds over the defaults, by metric: the four SPEC §10 metrics "
        "(mean_usage_ratio, high_correction_rate, budget_waste_ratio, unused_injection_rate) and "
        "the retrieval metrics retrieval_hit_rate (default 0.50) and retrieval_precision_at_1 "
        "(default 0.30), both alerting below their threshold (docs/METRICS.md).",
    )
    weights = serializers.DictField(child=serializers.FloatField())
    retrieval = serializers.DictField(
        help_text="The retrieval profile's eligibility rules: confidence_floor, conditions."
    )
    retention_days = serializers.IntegerField(
        allow_null=True,
        help_text="Operations, sessions and injections older than this many days are moved to "
        "the archive; null keeps them forever.",
    )
    created_at = serializers.DateTimeField()


class NamespaceList(serializers.Serializer):
    results = NamespaceOut(many=True)
    next = NEXT


def _choice(values, **kw) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=list(values), **kw)


class ObjectOut(serializers.Serializer):
    """An object now (API.md Object GET); apps add fields with :func:`register_object_field`."""

    id = serializers.UUIDField()
    namespace = serializers.CharField()
    content = serializers.CharField()
    domain_tags = serializers.ListField(child=serializers.CharField())
    epistemic_type = _choice(policy.EPISTEMIC_TYPES)
    condition_state = _choice(policy.CONDITION_STATES, allow_null=True)
    decay_profile = _choice(policy.DECAY_PROFILES)
    confidence = serializers.FloatField()
    salience_base = serializers.FloatField()
    salience_effective = serializers.FloatField()
    reinforcement_boost = serializers.FloatField()
    reinforcement_count = serializers.IntegerField()
    last_reinforced_at = serializers.DateTimeField(allow_null=True)
    evidence_ids = serializers.ListField(child=serializers.CharField())
    pinned = serializers.BooleanField()
    created_by = serializers.CharField()
    created_by_type = _choice(policy.ACTOR_TYPES)
    created_at = serializers.DateTimeField()
    version = serializers.IntegerField()
    head_hash = serializers.CharField()


def register_object_field(name: str, field: serializers.Field) -> None:
    """Document a field an app adds to every object answer (``rms.extensions``), e.g. the
    ``aggregate`` of ``feedback``: ``rms`` never imports the apps built on it."""
    ObjectOut._declared_fields[name] = field


class ObjectList(serializers.Serializer):
    results = ObjectOut(many=True)
    next = NEXT


class OperationOut(serializers.Serializer):
    """An operation as stored (SPEC §6): the hashed row plus ``seq`` and ``hash``."""

    seq = serializers.IntegerField(
        allow_null=True,
        help_text="The log position; null in the answer that created the operation on SQLite, "
        "where it is assigned by the database after the insert.",
    )
    id = serializers.UUIDField()
    ts = serializers.DateTimeField()
    op_type = serializers.CharField()
    target_type = _choice(
        (oplog.TARGET_OBJECT, oplog.TARGET_SESSION, oplog.TARGET_RELATIONSHIP, "namespace")
    )
    target_id = serializers.CharField()
    namespace = serializers.CharField()
    actor_id = serializers.CharField()
    actor_type = serializers.CharField()
    session_id = serializers.CharField(allow_null=True)
    payload = serializers.DictField(help_text="By op_type, as SPEC §6 lists.")
    policy_version = serializers.CharField(allow_null=True)
    state = serializers.DictField(allow_null=True, help_text="The target's state after it.")
    prev_hash = serializers.CharField()
    hash = serializers.CharField()


class OperationList(serializers.Serializer):
    results = OperationOut(many=True)
    next = NEXT


class OperationRef(serializers.Serializer):
    seq = serializers.IntegerField()
    id = serializers.UUIDField()
    op_type = serializers.CharField()
    ts = serializers.DateTimeField()


class ObjectStateOut(serializers.Serializer):
    """The object as it stood at ``as_of``, replayed from its log."""

    id = serializers.UUIDField()
    namespace = serializers.CharField()
    as_of = serializers.DateTimeField()
    content = serializers.CharField()
    epistemic_type = _choice(policy.EPISTEMIC_TYPES)
    condition_state = _choice(policy.CONDITION_STATES, allow_null=True)
    decay_profile = _choice(policy.DECAY_PROFILES)
    confidence = serializers.FloatField()
    salience_base = serializers.FloatField()
    salience_effective = serializers.FloatField()
    reinforcement_boost = serializers.FloatField()
    reinforcement_count = serializers.IntegerField()
    last_reinforced_at = serializers.DateTimeField(allow_null=True)
    evidence_ids = serializers.ListField(child=serializers.CharField())
    pinned = serializers.BooleanField()
    version = serializers.IntegerField()
    operation = OperationRef()


class ExplainWeight(serializers.Serializer):
    name = _choice(("gamma", "delta"))
    asked = serializers.FloatField(help_text="The signal type's base weight (γ0 or δ base).")
    applied = serializers.FloatField(help_text="γ_eff or δ as applied.")


class ExplainControl(serializers.Serializer):
    control = _choice(
        (
            "reliability_discount",
            "correlation_discount",
            "repeat_diminishing",
            "session_cap",
            "ceiling",
            "floor",
        )
    )
    cut = serializers.FloatField(
        help_text="How much this control took away: from the weight (unit `weight`), or from "
        "the confidence change (unit `confidence`: what the ceiling held down, or the part of "
        "a penalty the floor held back)."
    )
    unit = _choice(("weight", "confidence"))


#: ``from`` is a Python keyword, so this one is declared by ``type``.
ExplainChange = type(
    "ExplainChange",
    (serializers.Serializer,),
    {"from": serializers.CharField(allow_null=True), "to": serializers.CharField()},
)


class ExplainStep(serializers.Serializer):
    kind = _choice(
        ("signal", "rejected", "admin", "decay"),
        help_text="`signal` a REINFORCE or PENALTY; `rejected` a signal the policy refused "
        "(nothing moved); `admin` a pin, unpin, transition or condition change; `decay` the "
        "read-time decay of effective salience over a stretch of time.",
    )
    operation_id = serializers.UUIDField(allow_null=True)
    op_type = serializers.CharField(allow_null=True)
    ts = serializers.DateTimeField()
    before = serializers.FloatField()
    after = serializers.FloatField()
    actor_id = serializers.CharField(required=False)
    actor_type = serializers.CharField(required=False)
    signal_type = serializers.CharField(required=False)
    detection_method = serializers.CharField(required=False)
    session_id = serializers.CharField(required=False, allow_null=True)
    reason = serializers.CharField(required=False, allow_null=True)
    weight = ExplainWeight(required=False)
    controls = ExplainControl(many=True, required=False)
    from_ts = serializers.DateTimeField(required=False, help_text="`decay`: start of the stretch.")
    days_since_reinforcement = serializers.FloatField(required=False)
    decay_profile = serializers.CharField(required=False)
    change = ExplainChange(required=False, help_text="`admin`: a transition's or condition's.")
    confidence_requested = serializers.FloatField(required=False, allow_null=True)


class ExplainTotals(serializers.Serializer):
    signal = serializers.FloatField()
    rejected = serializers.FloatField()
    admin = serializers.FloatField()
    decay = serializers.FloatField()
    change = serializers.FloatField(help_text="`final` − `start`.")


class ExplainSeries(serializers.Serializer):
    start = serializers.FloatField(help_text="The value at creation.")
    steps = ExplainStep(many=True, help_text="`after` of each is `before` of the next.")
    final = serializers.FloatField(help_text="The object's value at `as_of`.")
    totals = ExplainTotals(help_text="Σ (after − before) by kind of step.")


class ExplainOut(serializers.Serializer):
    """Why the object's confidence and salience are what they are, from its chain."""

    id = serializers.UUIDField()
    namespace = serializers.CharField()
    as_of = serializers.DateTimeField()
    epistemic_type = _choice(policy.EPISTEMIC_TYPES)
    decay_profile = _choice(policy.DECAY_PROFILES)
    pinned = serializers.BooleanField()
    last_reinforced_at = serializers.DateTimeField(allow_null=True)
    confidence = ExplainSeries()
    salience_base = ExplainSeries()
    salience_effective = ExplainSeries()


class HealthOut(serializers.Serializer):
    status = _choice(("ok", "degraded"))
    database = _choice(("ok", "unavailable"))
    broker = _choice(("ok", "unavailable"))


# --- relationships ------------------------------------------------------------------------------


class RelationshipOut(serializers.Serializer):
    id = serializers.UUIDField()
    namespace = serializers.CharField()
    source = serializers.UUIDField()
    target = serializers.UUIDField()
    relation = serializers.CharField()
    extraction_context = _choice(evidence.EXTRACTION_CONTEXTS)
    alpha = serializers.FloatField()
    beta = serializers.FloatField()
    mean = serializers.FloatField()
    variance = serializers.FloatField()
    effective_confidence = serializers.FloatField()
    prior_mean = serializers.FloatField()
    corroborations = serializers.IntegerField()
    contradictions = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    last_corroborated_at = serializers.DateTimeField(allow_null=True)
    version = serializers.IntegerField()
    as_of = serializers.DateTimeField(required=False, help_text="Only with `?as_of=`.")


class RelationshipList(serializers.Serializer):
    results = RelationshipOut(many=True)
    next = NEXT


class ExpansionOut(serializers.Serializer):
    object_id = serializers.UUIDField()
    score = serializers.FloatField()
    seed = serializers.UUIDField()
    path = serializers.ListField(child=serializers.UUIDField(), help_text="Relationship ids.")


class ExpansionList(serializers.Serializer):
    results = ExpansionOut(many=True)


class CalibrationRowOut(serializers.Serializer):
    extraction_context = _choice(evidence.EXTRACTION_CONTEXTS)
    prior_mean = serializers.FloatField()
    edges = serializers.IntegerField()
    observations = serializers.IntegerField()
    corroborations = serializers.IntegerField()
    observed = serializers.FloatField(allow_null=True)
    difference = serializers.FloatField(allow_null=True)


class CalibrationOut(serializers.Serializer):
    namespace = serializers.CharField()
    results = CalibrationRowOut(many=True)


class DegradedWarning(serializers.Serializer):
    """A dependency that was away while the answer was made (``rms.degraded``)."""

    code = serializers.ChoiceField(choices=["cache_unavailable", "broker_unavailable"])
    message = serializers.CharField()


def degraded_warnings(what: str) -> DegradedWarning:
    return DegradedWarning(many=True, required=False, help_text=what)
