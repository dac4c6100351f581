"""Starting and rendering worker tasks (API.md tasks): kinds, who may start them, their params.

``task_start`` validates everything a caller can get wrong before anything is written, so a bad
request is a 400/403 and leaves no TaskRun behind; the run is enqueued only after its row is
committed (STYLE §6), so the worker always finds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from feedback import enqueue, simulations
from feedback.models import TaskRun
from rms import telemetry
from rms.errors import DomainError, Forbidden
from rms.models import ApiClient, Namespace
from rms.replay import iso

logger = logging.getLogger(__name__)

IGNORED_SWEEP = "ignored_sweep"
REBUILD_AGGREGATES = "rebuild_aggregates"
VERIFY_REPLAY = "verify_replay"
VERIFY_CHAIN = "verify_chain"
STABILITY_SIMULATION = "stability_simulation"
PRECISION_SIMULATION = "precision_simulation"
BENCHMARK_SUITE = "benchmark_suite"
METRIC_SNAPSHOT = "metric_snapshot"

OPERATOR_ROLES = (ApiClient.ROLE_OPERATOR, ApiClient.ROLE_ADMIN)
ADMIN_ROLES = (ApiClient.ROLE_ADMIN,)


def claimed_now(now) -> dict:
    """The fields a worker sets when it claims a run or a chunk (``TaskRun``, ``TaskChunk``):
    running from ``now``, no progress, no error, one attempt more."""
    return {
        "state": TaskRun.RUNNING,
        "started_at": now,
        "heartbeat_at": now,
        "finished_at": None,
        "progress": 0.0,
        "error": "",
        "attempts": F("attempts") + 1,
    }


@dataclass(frozen=True)
class Param:
    """One task parameter: its JSON type, default and inclusive bounds."""

    type: str  # "int", "float" or "namespace"
    default: Any = None
    min: float | None = None
    max: float | None = None


#: Keys per chunk of a fanned-out kind (issue 17, ``feedback.fanout``): objects for the sweep,
#: the rebuild and the replay check, targets of each table for the chain check.
DEFAULT_CHUNK_SIZE = 1000
MAX_CHUNK_SIZE = 100_000
CHUNK_SIZE = Param("int", DEFAULT_CHUNK_SIZE, 1, MAX_CHUNK_SIZE)

#: Seeds are any non-negative integer a JSON number and a ``random.Random`` both hold exactly.
SEED = Param("int", simulations.DEFAULT_SEED, 0, 2**53)
#: Sizes are bounded so the largest simulation finishes in seconds, well inside the time limit.
MAX_SESSIONS = 1000
MAX_CORPUS = 1000


@dataclass(frozen=True)
class Kind:
    roles: tuple[str, ...]
    params: dict[str, Param] = field(default_factory=dict)


KINDS: dict[str, Kind] = {
    IGNORED_SWEEP: Kind(ADMIN_ROLES, {"namespace": Param("namespace"), "chunk_size": CHUNK_SIZE}),
    REBUILD_AGGREGATES: Kind(
        ADMIN_ROLES, {"namespace": Param("namespace"), "chunk_size": CHUNK_SIZE}
    ),
    VERIFY_REPLAY: Kind(OPERATOR_ROLES, {"chunk_size": CHUNK_SIZE}),
    VERIFY_CHAIN: Kind(OPERATOR_ROLES, {"chunk_size": CHUNK_SIZE}),
    STABILITY_SIMULATION: Kind(
        OPERATOR_ROLES,
        {
            "seed": SEED,
            "sessions": Param("int", 100, 1, MAX_SESSIONS),
            "corpus_size": Param("int", 60, 1, MAX_CORPUS),
            "injected_per_session": Param("int", 8, 1, 100),
            "streak_threshold": Param("int", 5, 1, 100),
        },
    ),
    PRECISION_SIMULATION: Kind(
        OPERATOR_ROLES,
        {
            "seed": SEED,
            "sessions": Param("int", 50, 1, MAX_SESSIONS),
            "relevant": Param("int", 8, 0, MAX_CORPUS),
            "wrong": Param("int", 4, 0, MAX_CORPUS),
            "filler": Param("int", 28, 0, MAX_CORPUS),
            "confirm_probability": Param("float", 0.85, 0.0, 1.0),
            "correct_probability": Param("float", 0.9, 0.0, 1.0),
        },
    ),
    BENCHMARK_SUITE: Kind(OPERATOR_ROLES, {"seed": SEED}),
    METRIC_SNAPSHOT: Kind(OPERATOR_ROLES, {"namespace": Param("namespace")}),
}


def _check_param(name: str, spec: Param, value: Any) -> tuple[Any, str | None]:
    """(normalised value, error message or None)."""
    if spec.type == "namespace":
        if value is None:
            return None, None
        if not isinstance(value, str) or not value:
            return None, "Must be a namespace name."
        if not Namespace.objects.filter(name=value).exists():
            return None, f"Unknown namespace {value!r}."
        return value, None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, "Must be a number." if spec.type == "float" else "Must be an integer."
    if spec.type == "int":
        if isinstance(value, float):
            if not value.is_integer():
                return None, "Must be an integer."
            value = int(value)
    else:
        value = float(value)
    if spec.min is not None and value < spec.min or spec.max is not None and value > spec.max:
        return None, f"Must be between {_num(spec.min)} and {_num(spec.max)}."
    return value, None


def _num(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


def validate_params(kind: str, params: Any) -> dict:
    """The params of ``kind`` with defaults filled in (stored, so a run shows what it ran with);
    every problem is reported at once as a 400 with ``fields`` ``params.<name>``."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise DomainError(
            "validation_error",
            "The task parameters are invalid.",
            400,
            {"params": ["Must be a JSON object."]},
        )
    spec = KINDS[kind].params
    errors: dict[str, list[str]] = {
        f"params.{name}": [f"Unknown parameter for {kind}."]
        for name in sorted(set(params) - set(spec))
    }
    out: dict[str, Any] = {}
    for name, param in spec.items():
        value, error = _check_param(name, param, params.get(name, param.default))
        if error:
            errors[f"params.{name}"] = [error]
        elif value is not None:
            out[name] = value
    if not errors:
        errors = _cross_checks(kind, out)
    if errors:
        raise DomainError("validation_error", "The task parameters are invalid.", 400, errors)
    return out


def _cross_checks(kind: str, params: dict) -> dict[str, list[str]]:
    """Constraints between params that the simulations would otherwise refuse at run time."""
    if kind == STABILITY_SIMULATION and params["injected_per_session"] > params["corpus_size"]:
        return {"params.injected_per_session": ["Must not exceed corpus_size."]}
    if kind == PRECISION_SIMULATION:
        corpus = params["relevant"] + params["wrong"] + params["filler"]
        if corpus < simulations.TOP_K:
            return {"params.filler": [f"The corpus needs at least {simulations.TOP_K} objects."]}
    return {}


def check_kind(client: ApiClient, kind: Any) -> Kind:
    """The kind, if this caller may start it: clients never (403), operators the read-only
    verifications and simulations, admins everything; an unknown kind is 400."""
    if client.role not in OPERATOR_ROLES:
        raise Forbidden("Only operators and admins may start tasks.")
    if not isinstance(kind, str) or kind not in KINDS:
        raise DomainError(
            "unknown_kind",
            f"Unknown task kind {kind!r}.",
            400,
            {"kind": [f"Must be one of: {', '.join(KINDS)}."]},
        )
    spec = KINDS[kind]
    if client.role not in spec.roles:
        raise Forbidden(f"Only admins may start {kind}.")
    return spec


def task_start(*, client: ApiClient, kind: Any, params: Any) -> TaskRun:
    """Validate, create a queued TaskRun and send ``run_task`` after the commit.

    One transaction; the message is sent from ``on_commit``, so a rolled-back start sends
    nothing and a worker never sees a run that is not yet visible. Raises DomainError (400) or
    Forbidden (403) before writing anything. A broker that cannot take the message does not
    fail the call: the run stays queued, unsent, and beat's reconciler sends it once the broker
    is back (``send``), so the caller always gets the run's id.
    """
    check_kind(client, kind)
    clean = validate_params(kind, params)
    with transaction.atomic():
        run = TaskRun.objects.create(kind=kind, params=clean, created_by=client.name)
        send_on_commit(run)
    return run


def send_on_commit(run: TaskRun) -> None:
    """Send ``run_task`` for ``run`` once the current transaction commits."""
    run_id = run.pk
    transaction.on_commit(lambda: send(run_id))


def send(run_id) -> bool:
    """Publish ``run_task`` for a committed run and stamp ``sent_at``; False (logged and
    counted, never raised) when the broker is unreachable."""
    try:
        enqueue.run_task(run_id)
    except Exception as exc:  # kombu/redis/socket errors: the broker cannot take it now
        telemetry.incr(telemetry.TASK_SEND_FAILURES)
        logger.warning("task run %s not sent (the reconciler will retry): %s", run_id, exc)
        return False
    TaskRun.objects.filter(pk=run_id, state=TaskRun.QUEUED).update(sent_at=timezone.now())
    return True


def task_out(run: TaskRun) -> dict:
    return {
        "id": str(run.pk),
        "kind": run.kind,
        "state": run.state,
        "progress": run.progress,
        "result": run.result,
        "error": run.error or None,
        "params": run.params,
        "created_by": run.created_by,
        "attempts": run.attempts,
        "sent": run.sent_at is not None,
        "heartbeat_at": iso(run.heartbeat_at),
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
    }
