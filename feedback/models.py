"""Feedback models: per-object aggregates (SPEC §8), sessions, injections, signal records, metric
snapshots and alerts (task runs are ``taskruns.models``).

Foreign keys that lead a composite index are declared ``db_index=False``: the composite index
serves their lookups and cascades, and every ingested row then writes one index less.
"""

from __future__ import annotations

import uuid

from django.db import models

from rms.models import MemoryObject, Namespace
from rms.policy import TOTAL_FIELDS


class FeedbackAggregate(models.Model):
    """One row per object that has received feedback; kept current on every write (SPEC §8).

    Written only while the object's row lock is held. Rebuildable from the operation log alone.
    """

    object = models.OneToOneField(
        MemoryObject, on_delete=models.CASCADE, primary_key=True, related_name="aggregate"
    )
    namespace = models.ForeignKey(
        Namespace, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    total_injections = models.PositiveIntegerField(default=0)
    total_token_cost = models.PositiveBigIntegerField(default=0)
    # One count per signal type with an aggregate total (SPEC §8), named by the policy: a new
    # one is a row in rms.policy.SIGNALS plus the migration makemigrations writes.
    locals().update({f: models.PositiveIntegerField(default=0) for f in TOTAL_FIELDS.values()})
    usage_ratio = models.FloatField(null=True, blank=True)
    last_positive_signal = models.DateTimeField(null=True, blank=True)
    last_negative_signal = models.DateTimeField(null=True, blank=True)
    lifetime_gamma_applied = models.FloatField(default=0.0)
    lifetime_delta_applied = models.FloatField(default=0.0)
    unused_streak = models.PositiveIntegerField(default=0)
    utility = models.FloatField(default=0.5)
    uses = models.PositiveIntegerField(default=0)
    last_use_at = models.DateTimeField(null=True, blank=True)
    unused_sessions = models.PositiveIntegerField(default=0)
    checked_unused_sessions = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            # Covering: the review queue, the wasteful-object set, the usage histogram and the
            # all-time injection sums are answered from the index alone (INCLUDE on PostgreSQL).
            models.Index(
                fields=["namespace", "usage_ratio"],
                include=["object", "total_injections", "total_token_cost", "unused_sessions"],
                name="agg_ns_usage",
            ),
            models.Index(fields=["namespace", "unused_streak"], name="agg_ns_streak"),
            # The object listings' sorts on the aggregate (feedback.selectors.object_filters):
            # rms.selectors.NullsApart reads the rows that have the column in (column, object)
            # order, joining each to its object, so a page stops after its rows.
            models.Index(fields=["usage_ratio", "object"], name="agg_usage_obj"),
            models.Index(fields=["total_injections", "object"], name="agg_injections_obj"),
            models.Index(fields=["last_use_at", "object"], name="agg_last_use_obj"),
            models.Index(fields=["total_token_cost", "object"], name="agg_tokens_obj"),
        ]

    def __str__(self) -> str:
        return f"aggregate of {self.object_id}"


class FeedbackSession(models.Model):
    """One LLM interaction that used a memory bundle (SPEC §7), with its own operation chain.

    ``(client, request_id)`` is the idempotency key; ``record`` is the answer (rebuilt from the
    session's FEEDBACK_SESSION operation unless the row stores one).
    """

    OUTCOMES = ("SUCCESS", "PARTIAL", "FAILED")

    id = models.UUIDField(primary_key=True, editable=False)
    client = models.ForeignKey(
        "rms.ApiClient", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    request_id = models.CharField(max_length=200)
    body_hash = models.CharField(max_length=64)
    session_id = models.CharField(max_length=200)
    ts = models.DateTimeField()
    namespace_scope = models.JSONField(default=list)
    context_budget = models.PositiveIntegerField()
    tokens_used = models.PositiveIntegerField()
    context_text = models.TextField(blank=True, default="")
    context_tags = models.JSONField(default=list, blank=True)
    outcome = models.CharField(max_length=8, null=True, blank=True)
    # NULL: the record is its FEEDBACK_SESSION payload's (``record``, feedback.session_record).
    stored_record = models.JSONField(db_column="record", null=True, blank=True)
    head_hash = models.CharField(max_length=64)
    last_op_ts = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["client", "request_id"], name="session_client_request")
        ]
        indexes = [models.Index(fields=["session_id", "ts"], name="session_sid_ts")]

    def __str__(self) -> str:
        return f"session {self.session_id} / {self.request_id}"

    #: The record rebuilt from the log, once read (``feedback.session_record.fill``).
    rebuilt: dict | None = None

    @property
    def record(self) -> dict | None:
        """The session record (API.md): the stored one when the row has it, else rebuilt from
        its FEEDBACK_SESSION operation (one query, or none after ``session_record.fill``)."""
        if self.stored_record is not None:
            return self.stored_record
        if self.rebuilt is None:
            from feedback import session_record

            session_record.fill([self])
        return self.rebuilt

    @record.setter
    def record(self, value: dict | None) -> None:
        self.stored_record = value


def event_ref(to, **options) -> models.ForeignKey:
    """A reference from an append-only event row (session scope, injection, signal record) to
    its session, object or namespace, without a database FOREIGN KEY constraint.

    The ingestion transaction writes these rows beside the session it creates, for objects it has
    locked and namespaces it has read, and nothing deletes sessions, objects or namespaces (an
    ORM delete still cascades: Django does that itself). Django's deferred constraints would
    re-check all 42 references of a session at COMMIT, 70-90 ms of a 500-session batch
    (docs/DECISIONS.md).
    """
    return models.ForeignKey(to, on_delete=models.CASCADE, db_constraint=False, **options)


class SessionNamespace(models.Model):
    """A session counts in every namespace of its scope (SPEC §10): one row per namespace, with
    what the metrics need, so a windowed metric is one indexed aggregate query."""

    session = event_ref(FeedbackSession, related_name="scopes")
    namespace = event_ref(Namespace, related_name="+", db_index=False)
    ts = models.DateTimeField()
    context_budget = models.PositiveIntegerField()
    has_corrected = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Covering: the windowed session sums never read the table.
            models.Index(
                fields=["namespace", "ts"],
                include=["context_budget", "has_corrected"],
                name="sessns_ns_ts",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id} in {self.namespace_id}"


class InjectionEvent(models.Model):
    """One injected object in one session (RFC-0009 §3); mirrors its INJECTION_EVENT operation."""

    session = event_ref(FeedbackSession, related_name="injections")
    object = event_ref(MemoryObject, related_name="+", db_index=False)
    namespace = event_ref(Namespace, related_name="+", db_index=False)
    ts = models.DateTimeField()
    rank_position = models.PositiveIntegerField(null=True, blank=True)
    representation_type = models.CharField(max_length=50, blank=True, default="")
    token_cost = models.PositiveIntegerField()
    composite_score = models.FloatField(null=True, blank=True)
    str_value = models.FloatField(null=True, blank=True)
    ended_unused = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Covering: the windowed metric sums never read the table.
            models.Index(
                fields=["namespace", "ts"],
                include=["object", "token_cost", "ended_unused"],
                name="inj_ns_ts",
            ),
            # An object's injections newest first, covering the session: the sweep reads its
            # last ``streak`` sessions from the index alone (SPEC §9).
            models.Index(
                fields=["object", "-ts", "-id"], include=["session"], name="inj_obj_ts_id"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.object_id} in {self.session_id}"


class SignalRecord(models.Model):
    """The per-signal FEEDBACK_EVENT record: how it was detected, weighed and what it did."""

    feedback_session = event_ref(FeedbackSession, null=True, blank=True, related_name="signals")
    object = event_ref(MemoryObject, related_name="+", db_index=False)
    namespace = event_ref(Namespace, related_name="+", db_index=False)
    operation_id = models.UUIDField()
    ts = models.DateTimeField()
    session_id = models.CharField(max_length=200)
    signal_type = models.CharField(max_length=32)
    detection_method = models.CharField(max_length=32)
    reliability_class = models.CharField(max_length=10)
    base_weight = models.FloatField()
    effective_weight = models.FloatField()
    effect = models.CharField(max_length=12)
    reason = models.CharField(max_length=200, blank=True, default="")
    actor_id = models.CharField(max_length=200)
    actor_type = models.CharField(max_length=20)
    automatic = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "ts"], name="sig_ns_ts"),
            models.Index(fields=["object", "ts"], name="sig_obj_ts"),
        ]

    def __str__(self) -> str:
        return f"{self.signal_type} on {self.object_id}"


class MetricSnapshot(models.Model):
    """The four metrics of a namespace at one moment (SPEC §10), taken on beat for trends."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    ts = models.DateTimeField()
    window_hours = models.PositiveIntegerField()
    metrics = models.JSONField()
    warnings = models.JSONField(default=list)

    class Meta:
        indexes = [models.Index(fields=["namespace", "ts"], name="snap_ns_ts")]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "ts", "window_hours"], name="snap_unique")
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} @ {self.ts}"


class Alert(models.Model):
    """A metric of a namespace in ``alert`` from the snapshot that raised it to the one that
    resolved it (API.md "The closed loop"). Each change is also an operation (ALERT_RAISED,
    ALERT_RESOLVED) on the namespace's own chain, written in the same transaction."""

    OPEN, RESOLVED = "open", "resolved"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    metric = models.CharField(max_length=40)
    state = models.CharField(max_length=10, default=OPEN)
    raised_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True)
    threshold = models.FloatField()
    resolved_value = models.FloatField(null=True, blank=True)
    window = models.JSONField(default=dict)

    class Meta:
        ordering = ["-raised_at", "-id"]
        indexes = [models.Index(fields=["namespace", "raised_at"], name="alert_ns_raised")]
        constraints = [
            # At most one open alert per metric and namespace: a doubled snapshot cannot
            # raise twice.
            models.UniqueConstraint(
                fields=["namespace", "metric"],
                condition=models.Q(state="open"),
                name="alert_one_open",
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric} {self.state} @ {self.raised_at}"


class RetrievalDay(models.Model):
    """The retrieval-quality sums of one finished UTC day of a namespace, for the sessions one
    API client recorded (``feedback.retrieval_rollup``): what ``retrieval_quality.merge_days``
    adds up. ``ranks``: ``{rank or "": [injections, used, Σ token_cost, Σ used token_cost]}``;
    ``hits``: ``{best used rank or "": sessions}``."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(
        "rms.ApiClient", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    day = models.DateField()
    sessions = models.PositiveIntegerField()
    ranks = models.JSONField(default=dict)
    hits = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "day", "client"], name="retrieval_day_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} {self.day} client {self.client_id}"


class RetrievalHour(models.Model):
    """:class:`RetrievalDay`'s sums for one finished UTC hour of the day still running (the
    rollup's hours since the last midnight before its mark): a session lies in one hour, so
    hours add up like days."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    client = models.ForeignKey(
        "rms.ApiClient", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    hour = models.DateTimeField()
    sessions = models.PositiveIntegerField()
    ranks = models.JSONField(default=dict)
    hits = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "hour", "client"], name="retrieval_hour_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} {self.hour} client {self.client_id}"


class RetrievalRollupMark(models.Model):
    """How far a namespace's retrieval rollup reaches: everything before ``through`` (an hour
    boundary) is rolled up, the days before its UTC midnight in :class:`RetrievalDay`, the
    hours since in :class:`RetrievalHour` (a unit without sessions has no row), holding exactly
    the injections and signals up to ``injection_id`` and ``signal_id``. ``floor``: rows before
    it were deleted after they were rolled up (the retention pass), so the units before it are
    read live until the next run."""

    namespace = models.OneToOneField(
        Namespace, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    through = models.DateTimeField()
    injection_id = models.BigIntegerField(default=0)
    signal_id = models.BigIntegerField(default=0)
    floor = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.namespace_id} through {self.through}"


class WindowHour(models.Model):
    """The metric sums (SPEC §10) of one finished UTC hour of a namespace
    (``feedback.window_rollup``): its sessions (count, with a correction, Σ context_budget) and
    injections (count, ended unused, and the token cost of those whose object was in
    :class:`WasteMember` when the hour was summed or since kept in step with it)."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    sessions = models.PositiveIntegerField(default=0)
    corrected = models.PositiveIntegerField(default=0)
    budget = models.BigIntegerField(default=0)
    injections = models.PositiveIntegerField(default=0)
    unused = models.PositiveIntegerField(default=0)
    wasted = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["namespace", "hour"], name="window_hour_unique")
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} {self.hour}"


class WasteMember(models.Model):
    """An object the hourly rollup counts as wasteful (usage ratio below
    ``feedback.metrics.WASTE_USAGE_RATIO`` when it last looked): :class:`WindowHour`'s
    ``wasted`` sums the injections of exactly these objects. A read adds the difference to the
    objects wasteful now."""

    object = models.OneToOneField(
        MemoryObject, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")

    def __str__(self) -> str:
        return f"{self.object_id} wasteful"


class WindowRollupMark(models.Model):
    """How far the hourly rollup reaches (one row): every UTC hour before ``through`` is in
    :class:`WindowHour` (an hour without rows has none); the last injection, session-scope and
    signal ids its last run had seen (newer rows are read live); and ``floors``, ``{namespace id:
    ISO hour}`` before which the retention pass deleted rows since that run (read live)."""

    through = models.DateTimeField()
    injection_id = models.BigIntegerField(default=0)
    scope_id = models.BigIntegerField(default=0)
    signal_id = models.BigIntegerField(default=0)
    floors = models.JSONField(default=dict)
    #: The aggregate part (:class:`AggregateMember`, :class:`AggregateBin`) was written by a run
    #: with these ids; false before the first run that did (every read of it is live).
    aggregates = models.BooleanField(default=False)
    #: Namespaces whose aggregates moved since that run without an injection or a used signal
    #: to show it (a rebuild; the retention pass deleting such rows): read live until the next.
    aggregates_live = models.JSONField(default=list)
    #: The store's release bound (``rms.store``) read before that run counted the objects
    #: (:class:`ObjectMember`): every object changed since has an object-state operation at or
    #: beyond it. Null before the first run that counted them (their statistics read live).
    objects_bound = models.BigIntegerField(null=True)

    def __str__(self) -> str:
        return f"window rollup through {self.through}"


class AggregateMember(models.Model):
    """An object's aggregate values as the rollup's last run counted them
    (``feedback.aggregate_sums``): :class:`AggregateBin` holds the sums of exactly these rows,
    and a read takes an object that may have changed since out as counted here and adds it back
    as it is now."""

    object = models.OneToOneField(
        MemoryObject, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    namespace = models.ForeignKey(
        Namespace, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    usage_ratio = models.FloatField(null=True)
    total_injections = models.PositiveIntegerField()
    unused_sessions = models.PositiveIntegerField()
    total_token_cost = models.PositiveBigIntegerField()
    deprecated = models.BooleanField()

    class Meta:
        indexes = [
            # The objects counted as DEPRECATED, compared with those that are now at every read.
            models.Index(
                fields=["namespace", "object"],
                condition=models.Q(deprecated=True),
                name="aggmember_deprecated",
            ),
            models.Index(fields=["namespace"], name="aggmember_ns"),
        ]

    def __str__(self) -> str:
        return f"{self.object_id} as counted"


class AggregateBin(models.Model):
    """The sums of the :class:`AggregateMember` rows of one namespace and usage bin
    (``feedback.aggregate_sums.BinSums``; bin -1: the objects outside the usage histogram)."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    bin = models.SmallIntegerField()
    usage_sum = models.FloatField(default=0.0)
    #: BinSums.objects (a field named ``objects`` would hide the manager).
    counted = models.PositiveIntegerField(default=0)
    queue = models.PositiveIntegerField(default=0)
    injections = models.BigIntegerField(default=0)
    unused = models.BigIntegerField(default=0)
    wasted = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["namespace", "bin"], name="aggregate_bin_unique")
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} bin {self.bin}"


class ObjectMember(models.Model):
    """An object's (namespace, epistemic type, confidence bin) as the rollup's last run counted
    it (``feedback.aggregate_sums.object_key``): :class:`ObjectBin` holds the counts of exactly
    these rows; a read takes an object that may have changed since out as counted here and
    adds it back as it is now."""

    object = models.OneToOneField(
        MemoryObject, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    namespace = models.ForeignKey(
        Namespace, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    epistemic_type = models.CharField(max_length=16)
    bin = models.SmallIntegerField()

    def __str__(self) -> str:
        return f"{self.object_id} as counted"


class ObjectBin(models.Model):
    """The number of :class:`ObjectMember` rows of one namespace, epistemic type and confidence
    bin: the overview's object count and confidence histogram."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    epistemic_type = models.CharField(max_length=16)
    bin = models.SmallIntegerField()
    counted = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "epistemic_type", "bin"], name="object_bin_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace_id} {self.epistemic_type} bin {self.bin}"
