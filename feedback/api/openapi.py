"""The OpenAPI shapes of the feedback API's answers, for the schema only: the views
answer plain dicts; ``tests/rms/test_openapi.py`` validates real answers against these."""

from __future__ import annotations

from rest_framework import serializers

from feedback import metrics, utility
from feedback.aggregates import FIELDS as AGGREGATE_FIELDS
from rms import policy
from rms.api import openapi as core_openapi
from rms.api.openapi import NEXT, ErrorDetail, ObjectOut, OperationOut
from taskruns import kinds
from taskruns.models import TaskRun

EFFECTS = (
    policy.EFFECT_REINFORCED,
    policy.EFFECT_PENALIZED,
    policy.EFFECT_UNUSED,
    policy.EFFECT_REJECTED,
)
_TIMES = {"last_positive_signal", "last_negative_signal", "last_use_at"}
_FLOATS = {"lifetime_gamma_applied", "lifetime_delta_applied", "utility"}


def _aggregate_field(name: str) -> serializers.Field:
    if name in _TIMES:
        return serializers.DateTimeField(allow_null=True)
    if name in _FLOATS:
        return serializers.FloatField()
    return serializers.IntegerField()


#: SPEC §8: every field of ``feedback.aggregates.Aggregate`` plus ``usage_ratio``.
AggregateOut = type(
    "AggregateOut",
    (serializers.Serializer,),
    {
        "__doc__": "An object's feedback aggregate (SPEC §8).",
        **{name: _aggregate_field(name) for name in AGGREGATE_FIELDS},
        "usage_ratio": serializers.FloatField(allow_null=True),
    },
)


def _choice(values, **kw) -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=list(values), **kw)


class SignalAnswer(serializers.Serializer):
    operation = OperationOut(help_text="REINFORCE, PENALTY or FEEDBACK_EVENT (SPEC §6).")
    effect = _choice(EFFECTS)
    object = ObjectOut()


class SessionSignalOut(serializers.Serializer):
    signal_type = _choice(policy.SIGNAL_TYPES)
    object_id = serializers.UUIDField()
    detection_method = _choice(policy.DETECTION_METHODS)
    reliability_class = _choice(sorted({c for c, _ in policy.DETECTION_METHODS.values()}))
    effect = _choice(EFFECTS)
    operation_id = serializers.UUIDField()
    applied_gamma = serializers.FloatField(required=False)
    effective_gamma = serializers.FloatField(required=False)
    applied_delta = serializers.FloatField(required=False)
    effective_delta = serializers.FloatField(required=False)
    reason = serializers.CharField(required=False, help_text="Why the signal was rejected.")


class SessionRecord(serializers.Serializer):
    """The stored FEEDBACK_SESSION record (API.md)."""

    id = serializers.UUIDField()
    session_id = serializers.CharField()
    request_id = serializers.CharField()
    ts = serializers.DateTimeField()
    namespace_scope = serializers.ListField(child=serializers.CharField())
    context_budget = serializers.IntegerField()
    tokens_used = serializers.IntegerField()
    context_tags = serializers.ListField(child=serializers.CharField())
    outcome = _choice(utility.OUTCOMES, allow_null=True)
    injected_object_ids = serializers.ListField(child=serializers.UUIDField())
    signals = SessionSignalOut(many=True)
    unused_ids = serializers.ListField(child=serializers.UUIDField())
    session_str_mean = serializers.FloatField(allow_null=True)
    partial = serializers.BooleanField(
        required=False,
        help_text="Present (true) when parts in namespaces the caller may not read are left out.",
    )


class BatchItem(serializers.Serializer):
    """One item's answer, in the order sent: ``record`` for 201 (created) and 200 (an identical
    retry), ``error`` for 400 (invalid), 403 (a namespace the caller may not write) and 409."""

    status = serializers.ChoiceField(choices=[201, 200, 400, 403, 409])
    record = SessionRecord(required=False)
    error = ErrorDetail(required=False)


class BatchAnswer(serializers.Serializer):
    results = BatchItem(many=True)


class MetricOut(serializers.Serializer):
    value = serializers.FloatField(allow_null=True)
    threshold = serializers.FloatField()
    direction = _choice(sorted(set(metrics.DIRECTIONS.values())))
    state = _choice((metrics.STATE_OK, metrics.STATE_ALERT, metrics.STATE_NO_DATA))


MetricsByName = type(
    "MetricsByName",
    (serializers.Serializer,),
    {name: MetricOut() for name in metrics.METRIC_NAMES},
)


class MetricWindow(serializers.Serializer):
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)


class MetricWarning(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class MetricsOut(serializers.Serializer):
    namespace = serializers.CharField()
    window = MetricWindow()
    metrics = MetricsByName()
    warnings = MetricWarning(many=True)


class RetrievalQualityOut(serializers.Serializer):
    """Retrieval quality over a namespace's injections (docs/METRICS.md). An injection is
    *used* when its feedback session has a REFERENCED, CONFIRMED or TASK_COMPLETED_WITH signal
    on its object."""

    namespace = serializers.CharField()
    window = MetricWindow()
    actor_id = serializers.CharField(allow_null=True)
    sessions = serializers.IntegerField(
        help_text="Feedback sessions with at least one injection of this namespace in the window."
    )
    hit_rate = serializers.FloatField(
        allow_null=True, help_text="Share of those sessions with a used injection; null: none."
    )
    mrr = serializers.FloatField(
        allow_null=True,
        help_text="Mean over those sessions of 1 / rank of the best-ranked used injection "
        "(0 when none was used); null when there is no session.",
    )
    precision_at_rank = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Rank (as text) → used injections at that rank / injections at that rank.",
    )
    wasted_tokens_by_rank = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Rank → Σ token_cost of the injections at that rank that were not used.",
    )
    injections_by_rank = serializers.DictField(
        child=serializers.IntegerField(), help_text="Rank → injections at that rank."
    )
    alerts = type(
        "RetrievalAlertsByName",
        (serializers.Serializer,),
        {name: MetricOut() for name in metrics.RETRIEVAL_METRIC_NAMES},
    )(
        help_text="The retrieval metrics that raise alerts, with the namespace's threshold "
        "(alert_thresholds, default retrieval_hit_rate 0.50, retrieval_precision_at_1 0.30) and "
        "state over this window: retrieval_hit_rate is hit_rate, retrieval_precision_at_1 is "
        "precision_at_rank['1']; both alert below their threshold. The alerts themselves are "
        "raised on the trailing 24 h by the metric snapshots, like the four SPEC §10 metrics."
    )


class RankResult(serializers.Serializer):
    object_id = serializers.UUIDField()
    score = serializers.FloatField()
    eligible = serializers.BooleanField()
    reason = serializers.CharField(
        allow_null=True,
        help_text="Why not eligible: deprecated, condition_not_met, below_confidence_floor.",
    )
    similarity = serializers.FloatField()
    hotness = serializers.FloatField()
    utility = serializers.FloatField()
    confidence = serializers.FloatField()
    salience_effective = serializers.FloatField()


class RankProfile(serializers.Serializer):
    weights = serializers.DictField(child=serializers.FloatField())
    confidence_floor = serializers.FloatField()
    conditions = serializers.CharField()


class RankOut(serializers.Serializer):
    namespace = serializers.CharField()
    now = serializers.DateTimeField()
    profile = RankProfile()
    results = RankResult(many=True)


class DetectResult(serializers.Serializer):
    object_id = serializers.UUIDField()
    signal_type = _choice(policy.DETECTED_SIGNAL_TYPES)
    score = serializers.FloatField()
    reason = serializers.CharField()


class DetectOut(serializers.Serializer):
    results = DetectResult(many=True)


def task_kind(**kw) -> serializers.ChoiceField:
    """The task kinds of API.md, read from ``taskruns.kinds`` (a new kind is listed)."""
    return _choice(kinds.KINDS, **kw)


def _params_help() -> str:
    lines = []
    for name, kind in kinds.KINDS.items():
        params = ", ".join(kind.params) or "none"
        lines.append(f"`{name}`: {params}")
    return "Parameters by kind (defaults filled in): " + "; ".join(lines) + "."


class TaskStart(serializers.Serializer):
    kind = task_kind()
    params = serializers.DictField(required=False, help_text=_params_help())


class TaskOut(serializers.Serializer):
    id = serializers.UUIDField()
    kind = task_kind()
    state = _choice(TaskRun.STATES)
    progress = serializers.FloatField(min_value=0.0, max_value=1.0)
    result = serializers.DictField(allow_null=True, help_text="By kind (API.md).")
    error = serializers.CharField(allow_null=True)
    params = serializers.DictField()
    created_by = serializers.CharField()
    attempts = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class TaskList(serializers.Serializer):
    results = TaskOut(many=True)
    next = NEXT


class ReviewQueue(serializers.Serializer):
    results = ObjectOut(many=True)
    next = NEXT


# --- alerts (API.md "The closed loop") ----------------------------------------------------------


class AlertWindow(serializers.Serializer):
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)


class AlertOut(serializers.Serializer):
    id = serializers.UUIDField()
    namespace = serializers.CharField()
    metric = serializers.ChoiceField(choices=metrics.ALERT_METRIC_NAMES)
    state = serializers.ChoiceField(choices=("open", "resolved"))
    raised_at = serializers.DateTimeField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    value = serializers.FloatField(allow_null=True, help_text="The metric's value when raised.")
    threshold = serializers.FloatField()
    window = AlertWindow()
    duration_seconds = serializers.FloatField(allow_null=True, help_text="Null while open.")
    elapsed_seconds = serializers.FloatField(
        help_text="How long it lasted: its duration once resolved, so far while open."
    )
    resolved_value = serializers.FloatField(
        allow_null=True, help_text="The metric's value when resolved; null while open."
    )


class AlertList(serializers.Serializer):
    results = AlertOut(many=True)
    next = NEXT


class SuppressedOut(serializers.Serializer):
    id = serializers.UUIDField()
    content = serializers.CharField()
    epistemic_type = serializers.CharField()
    confidence = serializers.FloatField()
    pinned = serializers.BooleanField()
    decay_profile = serializers.CharField()
    reasons = serializers.ListField(
        child=serializers.ChoiceField(choices=("decayed", "ranked_out")),
        help_text="Which rules hold it down.",
    )
    salience_effective = serializers.FloatField(help_text="SPEC §1, at `now`.")
    best_score = serializers.FloatField(
        help_text="Its retrieval profile score at similarity 1, the best a query can give it."
    )
    kth_floor_score = serializers.FloatField(
        allow_null=True,
        help_text="The k-th best score of the namespace's other eligible objects at "
        "similarity 0; null when there are k or fewer.",
    )


class SuppressedList(serializers.Serializer):
    namespace = serializers.CharField()
    now = serializers.DateTimeField(
        help_text="The clock of decay and hotness: `as_of`, or when the listing was computed."
    )
    cached = serializers.BooleanField(
        help_text="Served from a listing computed before this request (at `now`), by the "
        "worker or an earlier request; false when computed for this one."
    )
    computed_at = serializers.DateTimeField(
        help_text="When the objects were read and scored (equals `now` without `as_of`)."
    )
    stale = serializers.BooleanField(
        help_text="Computed more than a few minutes ago (RMS_SUPPRESSED_CACHE_SECONDS): served "
        "while the worker recomputes it."
    )
    refreshing = serializers.BooleanField(
        help_text="A recomputation is queued or running on the worker; ask again for it."
    )
    salience_below = serializers.FloatField()
    k = serializers.IntegerField()
    profile = serializers.DictField(help_text="The namespace's retrieval profile, as /rank's.")
    count = serializers.IntegerField(help_text="Suppressed objects in all pages.")
    results = SuppressedOut(many=True)
    next = NEXT
    warnings = core_openapi.degraded_warnings(
        "Present when the cache was unreachable: the listing was computed for this request."
    )


class SuppressedPending(serializers.Serializer):
    namespace = serializers.CharField()
    status = serializers.CharField(help_text="`computing`: the worker is scoring the listing.")
    as_of = serializers.DateTimeField(allow_null=True)
    retry_after = serializers.IntegerField(
        help_text="Seconds to wait before asking again (also the Retry-After header)."
    )


class RankingStateRow(serializers.Serializer):
    object_id = serializers.UUIDField()
    version = serializers.IntegerField(help_text="The object's version this row was read at.")
    epistemic_type = serializers.CharField()
    condition_state = serializers.CharField(allow_null=True)
    confidence = serializers.FloatField()
    salience_base = serializers.FloatField()
    reinforcement_boost = serializers.FloatField()
    decay_profile = serializers.CharField()
    pinned = serializers.BooleanField()
    last_reinforced_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    utility = serializers.FloatField()
    uses = serializers.IntegerField()
    last_use_at = serializers.DateTimeField(allow_null=True)


class RankingStateOut(serializers.Serializer):
    namespace = serializers.CharField()
    feed_cursor = serializers.CharField(
        help_text="Follow /changes?after=<feed_cursor> (with event_types as types=) and apply "
        "an object event only when its data.version is above the row's version: exact."
    )
    profile = RankProfile()
    event_types = serializers.ListField(
        child=serializers.CharField(), help_text="The feed types a mirror follows."
    )
    results = RankingStateRow(many=True)
    next_cursor = serializers.CharField(
        allow_null=True, help_text="The next page's signed cursor; null on the last page."
    )
