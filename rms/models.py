"""Core models: namespaces, API clients, memory objects and the operation log (SPEC §1, §6).

Models hold data and small derived properties only; every write goes through ``rms.services``.
"""

from __future__ import annotations

import uuid
from functools import cached_property

from django.conf import settings
from django.db import models
from django.db.models.base import ModelState

from rms import policy
from rms.replay import STATE_FIELDS
from rms.store.fields import HashField

GENESIS_HASH = "0" * 64


def new_row(model, **values):
    """An unsaved instance for bulk inserts, built without ``Model.__init__``'s per-field
    descriptor work (a hot path: one per operation). Every concrete field must be given."""
    obj = model.__new__(model)
    obj._state = ModelState()
    obj.__dict__.update(values)
    return obj


def _choices(values) -> list[tuple[str, str]]:
    return [(v, v) for v in values]


class Namespace(models.Model):
    """A tenant of memory objects with its own thresholds and ranking weights (SPEC §8–§12)."""

    name = models.SlugField(max_length=100, unique=True)
    ignore_threshold = models.PositiveIntegerField(default=5)
    relevance_threshold = models.FloatField(default=0.2)
    alert_thresholds = models.JSONField(default=dict, blank=True)
    weights = models.JSONField(default=dict, blank=True)
    # The retrieval profile's eligibility rules (``rms.retrieval_rules``); its weights are
    # ``weights``. Empty: the defaults of ``feedback.retrieval.Profile``.
    retrieval = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The namespace's own operation chain (alerts, API.md "The closed loop"): ``uid`` is its
    # target id in the log, ``head_hash`` and ``last_op_ts`` as on an object.
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    head_hash = models.CharField(max_length=64, default=GENESIS_HASH)
    last_op_ts = models.DateTimeField(null=True, blank=True)
    # Operations, sessions and injections older than this many days are moved to the archive
    # by the retention pass (``feedback.retention``); None keeps them forever.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiClient(models.Model):
    """An API caller: a Django user with a role, namespaces and a hashed token (API.md)."""

    ROLE_CLIENT = "client"
    ROLE_OPERATOR = "operator"
    ROLE_ADMIN = "admin"
    ROLES = (ROLE_CLIENT, ROLE_OPERATOR, ROLE_ADMIN)

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_client"
    )
    name = models.CharField(max_length=150, unique=True)
    role = models.CharField(max_length=16, choices=_choices(ROLES))
    # sha256 of the token: a leaked database does not leak usable credentials.
    token_hash = models.CharField(max_length=64, unique=True)
    namespaces = models.ManyToManyField(Namespace, blank=True, related_name="clients")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.role})"

    @property
    def sees_all_namespaces(self) -> bool:
        return self.role in (self.ROLE_OPERATOR, self.ROLE_ADMIN)

    def namespace_names(self) -> set[str] | None:
        """Visible namespace names, or None for "all" (operators and admins); read once per
        loaded client (one request)."""
        if self.sees_all_namespaces:
            return None
        return self.linked_namespace_names

    @cached_property
    def linked_namespace_names(self) -> set[str]:
        if self.pk is None:
            # The dashboard's stand-in for a user with no API client (never saved): no links.
            return set()
        return set(self.namespaces.values_list("name", flat=True))

    def can_see(self, namespace_name: str) -> bool:
        names = self.namespace_names()
        return names is None or namespace_name in names


class MemoryObject(models.Model):
    """A fact, preference or rule the agent may inject (SPEC §1).

    ``head_hash`` and ``last_op_ts`` describe the object's operation chain: the hash of its latest
    operation (so a truncated chain is detectable) and that operation's event time (so a chain's
    time never goes backwards).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Not indexed alone: obj_ns_created and obj_ns_type start with it (one index less to write).
    namespace = models.ForeignKey(
        Namespace, on_delete=models.PROTECT, related_name="memory_objects", db_index=False
    )
    content = models.TextField()
    domain_tags = models.JSONField(default=list, blank=True)
    epistemic_type = models.CharField(max_length=16, choices=_choices(policy.EPISTEMIC_TYPES))
    condition_state = models.CharField(
        max_length=8, choices=_choices(policy.CONDITION_STATES), null=True, blank=True
    )
    decay_profile = models.CharField(max_length=10, choices=_choices(policy.DECAY_PROFILES))
    confidence = models.FloatField()
    salience_base = models.FloatField(default=policy.DEFAULT_SALIENCE_BASE)
    reinforcement_boost = models.FloatField(default=0.0)
    evidence_ids = models.JSONField(default=list, blank=True)
    pinned = models.BooleanField(default=False)
    created_by = models.CharField(max_length=200)
    created_by_type = models.CharField(max_length=20, choices=_choices(policy.ACTOR_TYPES))
    created_at = models.DateTimeField()
    last_reinforced_at = models.DateTimeField(null=True, blank=True)
    reinforcement_count = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField(default=0)
    head_hash = models.CharField(max_length=64, default=GENESIS_HASH)
    last_op_ts = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["namespace", "created_at", "id"], name="obj_ns_created"),
            models.Index(
                fields=["namespace", "epistemic_type"], include=["confidence"], name="obj_ns_type"
            ),
            # The objects browser's and GET /objects' sort and range filter on confidence.
            models.Index(fields=["namespace", "confidence", "id"], name="obj_ns_confidence"),
        ]

    def __str__(self) -> str:
        return f"{self.epistemic_type} {self.content[:60]}"

    #: What a write may change; saves name them so the (possibly long) content is not rewritten.
    WRITABLE_FIELDS = (*STATE_FIELDS, "version", "head_hash", "last_op_ts")

    @property
    def is_active(self) -> bool:
        return self.epistemic_type != policy.DEPRECATED

    def to_state(self) -> policy.ObjectState:
        return policy.ObjectState(
            epistemic_type=self.epistemic_type,
            decay_profile=self.decay_profile,
            confidence=self.confidence,
            salience_base=self.salience_base,
            condition_state=self.condition_state,
            reinforcement_boost=self.reinforcement_boost,
            reinforcement_count=self.reinforcement_count,
            last_reinforced_at=self.last_reinforced_at,
            pinned=self.pinned,
            evidence_ids=tuple(self.evidence_ids),
        )

    def apply_state(self, state: policy.ObjectState) -> None:
        self.epistemic_type = state.epistemic_type
        self.decay_profile = state.decay_profile
        self.confidence = state.confidence
        self.salience_base = state.salience_base
        self.condition_state = state.condition_state
        self.reinforcement_boost = state.reinforcement_boost
        self.reinforcement_count = state.reinforcement_count
        self.last_reinforced_at = state.last_reinforced_at
        self.pinned = state.pinned
        self.evidence_ids = list(state.evidence_ids)


class SessionTally(models.Model):
    """What an object has received within one session_id: the cap and 1/n counters (SPEC §3).

    Read and written only while the object's row lock is held.
    """

    object = models.ForeignKey(
        MemoryObject, on_delete=models.CASCADE, related_name="tallies", db_index=False
    )
    session_id = models.CharField(max_length=200)
    gamma_total = models.FloatField(default=0.0)
    repeats = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["object", "session_id"], name="tally_object_session")
        ]

    def __str__(self) -> str:
        return f"{self.object_id} in {self.session_id}: {self.gamma_total}"


class Operation(models.Model):
    """One row of the append-only, hash-chained operation log (SPEC §6).

    ``seq`` comes from the database sequence (gaps allowed). ``state`` is the target's full state
    after the operation, so "as of T" is one indexed read. On PostgreSQL the table also has a
    ``txid`` column (``xid8``, default ``pg_current_xact_id()``), outside the model: the change
    feed's release order, read only by ``rms.changes`` (migration 0006).
    """

    seq = models.BigAutoField(primary_key=True)
    # Not indexed: nothing looks operations up by id, and random-UUID index inserts are costly.
    id = models.UUIDField(default=uuid.uuid4, editable=False)
    ts = models.DateTimeField()
    op_type = models.CharField(max_length=32)
    target_type = models.CharField(max_length=32)
    target_id = models.UUIDField()
    namespace = models.CharField(max_length=100)
    actor_id = models.CharField(max_length=200)
    actor_type = models.CharField(max_length=20)
    session_id = models.CharField(max_length=200, null=True, blank=True)
    payload = models.JSONField()
    policy_version = models.CharField(max_length=32, blank=True, default="")
    state = models.JSONField(null=True, blank=True)
    # 32 bytes on PostgreSQL, hex text in Python (rms.store.fields).
    prev_hash = HashField()
    hash = HashField()

    class Meta:
        indexes = [
            models.Index(fields=["target_id", "ts", "seq"], name="op_target_ts"),
            models.Index(fields=["namespace", "op_type", "ts"], name="op_ns_type_ts"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.op_type} {self.target_id}"


class ChainCheckpoint(models.Model):
    """Where a chain's archived prefix ends (the retention pass, ``feedback.retention``): the
    hash and ``seq`` of its last archived operation, so ``verify_chain`` starts there; for an
    object, also the replay fold at the cut (state snapshot, version, session tallies), so
    ``verify_replay`` and ``as_of`` continue from it. The archive's manifest holds the same."""

    target_id = models.UUIDField(primary_key=True)
    target_type = models.CharField(max_length=32)
    namespace = models.CharField(max_length=100)
    seq = models.BigIntegerField()
    hash = models.CharField(max_length=64)
    ts = models.DateTimeField()
    operations = models.PositiveBigIntegerField(default=0)
    fold = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return f"checkpoint of {self.target_id} at #{self.seq}"


class Deployment(models.Model):
    """This deployment's identity (``rms.deployment``): one row, written once by migration
    ``rms/0010`` (or on first use after the table was emptied), read by every process. The
    change feed's cursors carry its id, so a cursor of another deployment is told apart."""

    ONE = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=ONE)
    deployment_id = models.CharField(max_length=16, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="deployment_one")]

    def __str__(self) -> str:
        return f"deployment {self.deployment_id}"


class IdempotencyRecord(models.Model):
    """The stored answer to a keyed request, so a retry returns it and changes nothing (SPEC §7)."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="+")
    scope = models.CharField(max_length=32)
    request_id = models.CharField(max_length=200)
    body_hash = models.CharField(max_length=64)
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "scope", "request_id"], name="idem_client_scope_request"
            )
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.request_id}"


class Relationship(models.Model):
    """An edge between two memory objects with Beta-Binomial confidence (SPEC §13).

    α and β are the posterior after every EDGE_EVIDENCE operation on the edge's own chain.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    namespace = models.ForeignKey(Namespace, on_delete=models.PROTECT, related_name="+")
    source = models.ForeignKey(MemoryObject, on_delete=models.CASCADE, related_name="edges_out")
    target = models.ForeignKey(MemoryObject, on_delete=models.CASCADE, related_name="edges_in")
    relation = models.CharField(max_length=100)
    extraction_context = models.CharField(max_length=16)
    alpha = models.FloatField()
    beta = models.FloatField()
    corroborations = models.PositiveIntegerField(default=0)
    contradictions = models.PositiveIntegerField(default=0)
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    last_corroborated_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)
    head_hash = models.CharField(max_length=64, default=GENESIS_HASH)
    last_op_ts = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "target", "relation"], name="edge_source_target_relation"
            )
        ]
        indexes = [
            models.Index(fields=["namespace", "extraction_context"], name="edge_ns_context"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} -{self.relation}-> {self.target_id}"
