"""The RFC-0008 §11 benchmark suite on the database (SPEC §14).

The exact checks are pure (``feedback.simulations``). The replay check is the real thing: it
writes ``OBJECTS`` objects with random histories through the live write services — object
creation, single and batch feedback sessions, idempotent retries, signals posted alone, pins,
unpins, transitions, condition changes and the IGNORED_REPEATEDLY sweep — into a sandbox
namespace, then reads each object's chain back from the operation log, folds it through
``rms.replay`` and compares the result bit for bit (``float.hex``) with the stored object row and
with the state stored beside every operation.

Sandbox: a namespace and an API client named ``sandbox-benchmark-<random hex>``, created for the
run, so nothing can clash with live data or with another run. The whole check is one transaction
rolled back at its end: nothing of the sandbox is ever committed, so no live object, aggregate,
metric, change-feed event or webhook ever sees it, and there is nothing to clean up. The price:
on PostgreSQL the change feed releases nothing newer than this transaction until it ends (about
as long as a large batch of sessions holds it back); on SQLite other writers queue behind it.

The history is drawn from ``random.Random(seed)``; ids and times differ between runs, and the
result reports neither, so the same seed gives the same result.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import secrets
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from feedback import ingest, simulations, sweep
from feedback import services as feedback_services
from feedback.utility import OUTCOMES
from rms import policy, replay, verification
from rms import services as core
from rms.errors import DomainError
from rms.models import ApiClient, MemoryObject, Namespace, Operation

Progress = Callable[[float], None]

SANDBOX_PREFIX = "sandbox-benchmark-"
OBJECTS = 100
#: Write steps after the objects are created: ~3,000 operations on the objects' chains.
STEPS = 240
#: The sandbox's IGNORED_REPEATEDLY threshold, low so the sweep penalises within the run.
IGNORE_THRESHOLD = 3
#: The share of a suite run's progress taken by the exact checks (they take well under a second).
EXACT_SHARE = 0.35
#: Within the replay check, the share of writing the history (the rest is reading and folding).
BUILD_SHARE = 0.6
#: Mismatches listed in the result; all are counted.
MAX_LISTED = 20

_TOPICS = {
    "billing": "invoice refund charge subscription plan",
    "deploys": "release rollout canary pipeline build",
    "oncall": "pager incident escalation rota outage",
    "customers": "account contract renewal feedback churn",
    "security": "token rotation audit access secret",
    "roadmap": "quarter milestone priority launch scope",
}
_EVIDENCE = ("e1", "e2", "e3", "e4", "e5")
_ACTORS = (
    ("user-1", "HUMAN_USER"),
    ("user-2", "HUMAN_USER"),
    ("agent-a", "AI_AGENT"),
    ("agent-b", "AI_AGENT"),
    ("analyzer", "SYSTEM_PROCESS"),
    ("crosscheck", "EXTERNAL_CONNECTOR"),
)
_CLIENT_SIGNALS = tuple(t for t in policy.SIGNAL_TYPES if t not in policy.SYSTEM_ONLY_SIGNALS)
_CLIENT_METHODS = tuple(m for m in policy.DETECTION_METHODS if m not in policy.SYSTEM_ONLY_METHODS)
_CREATE_TYPES = tuple(t for t in policy.EPISTEMIC_TYPES if t != policy.DEPRECATED)
#: (kind of write step, weight)
_STEPS = (
    ("session", 0.45),
    ("batch", 0.10),
    ("retry", 0.05),
    ("signal", 0.22),
    ("admin", 0.12),
    ("sweep", 0.06),
)


def _report(progress: Progress | None, fraction: float) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)))


def _pick(rng: random.Random, weighted) -> str:
    x = rng.random() * math.fsum(w for _, w in weighted)
    for value, weight in weighted:
        x -= weight
        if x < 0:
            return value
    return weighted[-1][0]


def _digest(body: dict) -> str:
    """The body's idempotency hash: the same body gives the same digest (SPEC §7)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Sandbox:
    """What a build wrote: the namespace, its client, the objects in creation order, and counts
    of the writes and of what the services answered."""

    namespace: Namespace
    client: ApiClient
    object_ids: list = field(default_factory=list)
    writes: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)
    refused: list = field(default_factory=list)


def create_sandbox() -> Sandbox:
    """A namespace and a client of that namespace only, named so nothing can clash."""
    name = SANDBOX_PREFIX + secrets.token_hex(8)
    ns = core.namespace_create(name=name, ignore_threshold=IGNORE_THRESHOLD)
    user = get_user_model().objects.create(username=name)
    # A digest of no token: no request can ever authenticate as this client.
    client = ApiClient.objects.create(
        user=user, name=name, role=ApiClient.ROLE_CLIENT, token_hash=secrets.token_hex(32)
    )
    client.namespaces.add(ns)
    return Sandbox(namespace=ns, client=client)


class _Builder:
    """Random histories written through the live services, one write step at a time."""

    def __init__(self, rng: random.Random, sandbox: Sandbox) -> None:
        self.rng = rng
        self.box = sandbox
        self.types: dict = {}  # object id -> epistemic type (moved only by admin changes)
        self.pinned: dict = {}
        self.topics: dict = {}
        self.sent: list[tuple[dict, str]] = []  # session bodies for idempotent retries
        self.requests = 0

    # --- objects ------------------------------------------------------------------------------

    def create(self, count: int, per_call: int = 25) -> None:
        rng = self.rng
        while len(self.box.object_ids) < count:
            items = []
            for _ in range(min(per_call, count - len(self.box.object_ids) - len(items))):
                epistemic_type = rng.choice(_CREATE_TYPES)
                topic = rng.choice(sorted(_TOPICS))
                ceiling = policy.ceiling_for(epistemic_type)
                item = {
                    "namespace": self.box.namespace.name,
                    "content": f"{topic}: {_TOPICS[topic]} note {rng.randrange(10**6)}",
                    "epistemic_type": epistemic_type,
                    "domain_tags": [topic] if rng.random() < 0.7 else [],
                    "evidence_ids": sorted(rng.sample(_EVIDENCE, rng.randint(0, 2))),
                }
                if rng.random() < 0.3:
                    item["confidence"] = 0.05 + (ceiling - 0.05) * rng.random()
                if rng.random() < 0.2:
                    item["salience_base"] = 0.1 + 0.8 * rng.random()
                if rng.random() < 0.1:
                    item["decay_profile"] = "PERMANENT"
                if epistemic_type == policy.CONDITIONAL:
                    item["condition_state"] = rng.choice(("UNKNOWN", "TRUE", "TRUE", "FALSE"))
                items.append((item, topic))
            created = core.object_create(client=self.box.client, items=[i for i, _ in items])
            self.box.writes["object_create"] += 1
            for obj, (_, topic) in zip(created, items, strict=True):
                self.box.object_ids.append(obj.pk)
                self.types[obj.pk] = obj.epistemic_type
                self.pinned[obj.pk] = obj.pinned
                self.topics[obj.pk] = topic

    # --- one write step -----------------------------------------------------------------------

    def step(self) -> None:
        kind = _pick(self.rng, _STEPS)
        if kind == "retry" and not self.sent:
            kind = "session"
        getattr(self, f"_{kind}")()
        self.box.writes[kind] += 1

    def _answer(self, kind: str, status: int, body) -> None:
        """Count an answer; a refusal comes back as the ``DomainError`` (sessions)."""
        self.box.answers[f"{kind}:{status}"] += 1
        if status >= 300:
            error = (
                {"code": body.code, "message": body.message}
                if isinstance(body, DomainError)
                else body.get("error")
            )
            self.box.refused.append({"write": kind, "status": status, "error": error})

    def _request_id(self) -> str:
        self.requests += 1
        return str(uuid.UUID(int=self.rng.getrandbits(128)))

    def _signal_entry(self, object_id, signal_type: str) -> dict:
        rng = self.rng
        entry = {"object_id": object_id, "signal_type": signal_type}
        if rng.random() < 0.7:
            entry["actor_id"], entry["actor_type"] = rng.choice(_ACTORS)
        if rng.random() < 0.4:
            entry["detection_method"] = rng.choice(_CLIENT_METHODS)
        entry["evidence_ids"] = sorted(rng.sample(_EVIDENCE, rng.randint(0, 2)))
        return entry

    def _session_body(self) -> dict:
        rng = self.rng
        ids = self.box.object_ids
        # A fifth of the objects are regulars, so streaks of unused sessions build up.
        regulars = ids[: len(ids) // 5]
        injected = list(
            dict.fromkeys(
                rng.sample(regulars, min(len(regulars), rng.randint(1, 4)))
                + rng.sample(ids, min(len(ids), rng.randint(1, 6)))
            )
        )
        signals = []
        for oid in injected:
            roll = rng.random()
            if roll < 0.35:
                signals.append(self._signal_entry(oid, rng.choice(_CLIENT_SIGNALS)))
            elif roll < 0.45:
                signals.append(self._signal_entry(oid, policy.UNUSED))
            if rng.random() < 0.1:  # a second signal, never a second UNUSED
                signal_type = rng.choice([t for t in _CLIENT_SIGNALS if t != policy.UNUSED])
                signals.append(self._signal_entry(oid, signal_type))
        if rng.random() < 0.15:  # a signal on an object the session did not inject
            signal_type = rng.choice([t for t in _CLIENT_SIGNALS if t != policy.UNUSED])
            signals.append(self._signal_entry(rng.choice(ids), signal_type))
        rng.shuffle(signals)
        topic = rng.choice(sorted(_TOPICS))
        context = rng.random()
        body = {
            "session_id": f"conversation-{rng.randrange(12)}",
            "request_id": self._request_id(),
            "namespace_scope": [self.box.namespace.name],
            "context_budget": 4000,
            "tokens_used": rng.randint(100, 4000),
            "context_tags": [topic] if context < 0.35 else [],
            "outcome": rng.choice((None, *OUTCOMES)),
            "injections": [
                {
                    "object_id": oid,
                    "rank_position": rank,
                    "token_cost": rng.randint(20, 400),
                    "composite_score": rng.random() if rng.random() < 0.7 else None,
                }
                for rank, oid in enumerate(injected, 1)
            ],
            "signals": signals,
        }
        if 0.35 <= context < 0.7:
            body["context_text"] = f"about {topic}: {_TOPICS[topic]}"
        return body

    def _session(self) -> None:
        body = self._session_body()
        digest = _digest(body)
        status, answer = ingest.record_one(client=self.box.client, data=body, body_hash=digest)
        self._answer("session", status, answer)
        self.sent.append((body, digest))

    def _batch(self) -> None:
        bodies = [self._session_body() for _ in range(self.rng.randint(2, 4))]
        items = [ingest.Item(body, _digest(body)) for body in bodies]
        for status, answer in ingest.record_sessions(client=self.box.client, items=items):
            self._answer("batch", status, answer)
        self.sent.extend((item.data, item.body_hash) for item in items)

    def _retry(self) -> None:
        body, digest = self.rng.choice(self.sent)
        status, answer = ingest.record_one(client=self.box.client, data=body, body_hash=digest)
        self._answer("retry", status, answer)

    def _signal(self) -> None:
        rng = self.rng
        object_id = rng.choice(self.box.object_ids)
        data = self._signal_entry(object_id, rng.choice(_CLIENT_SIGNALS))
        del data["object_id"]
        data["session_id"] = f"conversation-{rng.randrange(12)}"
        if rng.random() < 0.5:
            data["request_id"] = self._request_id()
        status, answer = feedback_services.signal_record(
            client=self.box.client,
            object_id=object_id,
            data=data,
            body_hash=_digest(data),
        )
        self._answer("signal", status, answer)

    def _admin(self) -> None:
        rng = self.rng
        live = [oid for oid in self.box.object_ids if self.types[oid] != policy.DEPRECATED]
        if not live:
            return
        pinned = [oid for oid in live if self.pinned[oid]]
        conditional = [oid for oid in live if self.types[oid] == policy.CONDITIONAL]
        roll = rng.random()
        if roll < 0.3 and pinned:
            oid = rng.choice(pinned)
        elif roll < 0.6 and conditional:
            oid = rng.choice(conditional)
        else:
            oid = rng.choice(live)
        epistemic_type = self.types[oid]
        options = ["pin" if not self.pinned[oid] else "unpin"]
        targets = sorted(to for frm, to in policy.TRANSITIONS if frm == epistemic_type)
        if targets:
            options.append("transition")
        if epistemic_type == policy.CONDITIONAL:
            options += ["condition", "condition"]
        if rng.random() < 0.1:
            options = ["deprecate"]
        change = rng.choice(options)
        common = {"client": self.box.client, "object_id": oid}
        if change == "pin":
            limit = policy.pin_limit(epistemic_type)
            confidence = limit * rng.random() if rng.random() < 0.5 else None
            obj = core.object_pin(**common, reason="benchmark", confidence=confidence)
        elif change == "unpin":
            obj = core.object_unpin(**common, reason="benchmark")
        elif change in ("transition", "deprecate"):
            to = policy.DEPRECATED if change == "deprecate" else rng.choice(targets)
            obj = core.object_transition(**common, to=to, reason="benchmark")
        else:
            state = rng.choice(policy.CONDITION_STATES)
            obj = core.object_condition(**common, condition_state=state)
        self.types[oid] = obj.epistemic_type
        self.pinned[oid] = obj.pinned
        self.box.writes[f"admin:{change}"] += 1

    def _sweep(self) -> None:
        summary = sweep.sweep(namespace=self.box.namespace)
        self.box.writes["sweep_examined"] += summary["examined"]
        self.box.writes["sweep_penalized"] += summary["penalized"]


def build_sandbox(
    rng: random.Random,
    *,
    objects: int = OBJECTS,
    steps: int = STEPS,
    progress: Progress | None = None,
) -> Sandbox:
    """Create a sandbox and write ``objects`` objects' random histories into it through the
    live services (each write is its own service call, as through the API). The caller holds
    the transaction (see :func:`check_replay`)."""
    sandbox = create_sandbox()
    builder = _Builder(rng, sandbox)
    builder.create(objects)
    for k in range(steps):
        builder.step()
        _report(progress, (k + 1) / steps)
    return sandbox


def _bits(value):
    """A stored state with every number as the hex of its double: "identical" is bit-identical
    (``float.hex`` tells 0.0 from -0.0 and 1e-17 from 0, where ``==`` may not)."""
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_bits(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value).hex()
    return value


def _replay_object(number: int, obj: MemoryObject) -> tuple[int, list[dict]]:
    """Fold one object's chain as stored through ``rms.replay``; (operations, mismatches)."""
    mismatches: list[dict] = []
    fold = replay.Fold()
    position = 0
    for position, op in enumerate(verification.chain_ops(obj.pk), 1):  # noqa: B007
        record = verification.op_record(op)
        try:
            state = replay.step(fold, record)
        except Exception as exc:  # a changed payload may break the fold anywhere
            reason = f"{type(exc).__name__}: {exc}"
            mismatches.append({"object": number, "position": position, "op_type": op.op_type,
                               "where": "replay", "reason": reason})  # fmt: skip
            return position, mismatches
        stored = record.state
        if stored is not None and _bits(replay.snapshot(state, fold.version)) != _bits(stored):
            mismatches.append({"object": number, "position": position, "op_type": op.op_type,
                               "where": "stored state"})  # fmt: skip
    if fold.state is None:
        return position, [{"object": number, "position": None, "where": "no OBJECT_CREATED"}]
    row = _bits(replay.snapshot(obj.to_state(), obj.version))
    if _bits(replay.snapshot(fold.state, fold.version)) != row:
        mismatches.append({"object": number, "position": None, "where": "object row"})
    return position, mismatches


def replay_sandbox(sandbox: Sandbox, progress: Progress | None = None) -> dict:
    """Replay every sandbox object from the stored log; the ``replay`` check of the suite."""
    by_id = MemoryObject.objects.in_bulk(sandbox.object_ids)
    operations = 0
    op_types: Counter = Counter()
    mismatched = 0
    listed: list[dict] = []
    confidences = []
    for number, object_id in enumerate(sandbox.object_ids):
        obj = by_id[object_id]
        count, mismatches = _replay_object(number, obj)
        operations += count
        if mismatches:
            mismatched += 1
            listed += mismatches[: MAX_LISTED - len(listed)]
        confidences.append(obj.confidence)
        _report(progress, (number + 1) / len(sandbox.object_ids))
    for op_type in (
        Operation.objects.filter(target_id__in=sandbox.object_ids)
        .values_list("op_type", flat=True)
        .iterator()
    ):
        op_types[op_type] += 1
    refused = len(sandbox.refused)
    return simulations.check_result(
        "replay",
        f"{len(by_id)} objects with random histories written through the live services, replayed "
        "from the stored log through rms.replay, equal the stored rows and states bit for bit.",
        mismatched == 0 and refused == 0 and len(by_id) == len(sandbox.object_ids),
        {
            "objects": len(by_id),
            "operations": operations,
            "mismatches": mismatched,
            "mismatch_list": listed,
            "operation_types": dict(sorted(op_types.items())),
            "writes": dict(sorted(sandbox.writes.items())),
            "answers": dict(sorted(sandbox.answers.items())),
            "refused": sandbox.refused[:MAX_LISTED],
            "mean_final_confidence": math.fsum(confidences) / len(confidences),
        },
    )


def check_replay(
    seed: int = simulations.DEFAULT_SEED,
    *,
    objects: int = OBJECTS,
    steps: int = STEPS,
    progress: Progress | None = None,
) -> dict:
    """Build a sandbox from ``seed``, replay it, and roll every row of it back.

    One transaction (savepoint when the caller has one open), rolled back whatever happens;
    ``progress`` gets the share done of writing and then of replaying."""
    rng = random.Random(seed)
    with transaction.atomic():
        try:
            sandbox = build_sandbox(
                rng,
                objects=objects,
                steps=steps,
                progress=lambda f: _report(progress, BUILD_SHARE * f),
            )
            return replay_sandbox(
                sandbox, progress=lambda f: _report(progress, BUILD_SHARE + (1 - BUILD_SHARE) * f)
            )
        finally:
            transaction.set_rollback(True)


def benchmark_suite(seed: int = simulations.DEFAULT_SEED, *, progress: Progress | None = None):
    """The RFC-0008 §11 benchmark checks (SPEC §14), each with its measured numbers: the exact
    checks, then the replay of 100 objects written through the live services (random, from
    ``seed``). Writes nothing that outlives the call (see :func:`check_replay`)."""
    checks = simulations.exact_checks(progress=lambda f: _report(progress, EXACT_SHARE * f))
    rest = 1 - EXACT_SHARE
    checks.append(check_replay(seed, progress=lambda f: _report(progress, EXACT_SHARE + rest * f)))
    return {
        "simulation": "benchmark_suite",
        "seed": seed,
        "passed": all(check["passed"] for check in checks),
        "checks": checks,
    }
