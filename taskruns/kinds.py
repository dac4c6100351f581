"""The one registry of task kinds (API.md tasks): who may start each, its params and their
validation, the service that runs it, and for the kinds that fan out
(``taskruns.chunks``) what a chunk walks and how the chunks' results merge.

The services stay in their own rooms; this module only adapts their signatures. Validation
reports everything a caller can get wrong before anything is written, so a bad request is a
400/403 and leaves no TaskRun behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from feedback import rebuild, simulations, snapshots, suite, sweep
from feedback.models import FeedbackSession
from rms import telemetry, verification
from rms.errors import DomainError, Forbidden
from rms.models import ApiClient, MemoryObject, Namespace

Progress = Callable[[float], None]

IGNORED_SWEEP = "ignored_sweep"
REBUILD_AGGREGATES = "rebuild_aggregates"
VERIFY_REPLAY = "verify_replay"
VERIFY_CHAIN = "verify_chain"
STABILITY_SIMULATION = "stability_simulation"
PRECISION_SIMULATION = "precision_simulation"
BENCHMARK_SUITE = "benchmark_suite"
METRIC_SNAPSHOT = "metric_snapshot"
ERASURE = "erasure"

OPERATOR_ROLES = (ApiClient.ROLE_OPERATOR, ApiClient.ROLE_ADMIN)
ADMIN_ROLES = (ApiClient.ROLE_ADMIN,)


@dataclass(frozen=True)
class Param:
    """One task parameter: its JSON type, default and inclusive bounds."""

    type: str  # "int", "float" or "namespace"
    default: Any = None
    min: float | None = None
    max: float | None = None


#: Keys per chunk of a fanned-out kind (``taskruns.chunks``): objects for the sweep,
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
class Chunked:
    """How a fanned-out kind runs as key-range chunks (``taskruns.chunks``)."""

    #: (table, queryset of its rows, key field) for the run's params, in the order they run.
    tables: Callable[[dict], list[tuple[str, QuerySet, str]]]
    #: (params, table, lo, hi, progress, run id) → the chunk's result.
    run: Callable[[dict, str, str | None, str | None, Progress, Any], dict]
    #: (the chunks' results in index order, params) → the run's result.
    merge: Callable[[list[dict], dict], dict]
    #: The whole-pass duration histogram, observed when the run is finalised; None: not timed.
    duration: Any = None


@dataclass(frozen=True)
class Kind:
    """A task kind: exactly one of ``run`` (the whole run in one task) and ``chunks``."""

    roles: tuple[str, ...]
    params: dict[str, Param] = field(default_factory=dict)
    #: (params, progress) → the run's result, for a kind that runs in one task.
    run: Callable[[dict, Progress], dict] | None = None
    chunks: Chunked | None = None
    #: Constraints between params that the service would otherwise refuse at run time.
    check: Callable[[dict], dict[str, list[str]]] | None = None
    #: False for a kind another endpoint starts (its runs are still listed): not offered on
    #: the tasks page.
    startable: bool = True

    @property
    def fanned_out(self) -> bool:
        return self.chunks is not None


# --- what each kind runs -----------------------------------------------------------------------


def namespace_of(params: dict) -> Namespace | None:
    name = params.get("namespace")
    if name is None:
        return None
    ns = Namespace.objects.filter(name=name).first()
    if ns is None:  # validated at start, deleted since
        raise DomainError("unknown_namespace", f"Namespace {name!r} no longer exists.")
    return ns


def _stability(params: dict, progress: Progress) -> dict:
    return simulations.stability_simulation(progress=progress, **params)


def _precision(params: dict, progress: Progress) -> dict:
    return simulations.precision_simulation(progress=progress, **params)


def _benchmark(params: dict, progress: Progress) -> dict:
    return suite.benchmark_suite(progress=progress, **params)


def _metric_snapshot(params: dict, progress: Progress) -> dict:
    return snapshots.take_snapshots(params.get("namespace"))


def _stability_check(params: dict) -> dict[str, list[str]]:
    if params["injected_per_session"] > params["corpus_size"]:
        return {"params.injected_per_session": ["Must not exceed corpus_size."]}
    return {}


def _precision_check(params: dict) -> dict[str, list[str]]:
    corpus = params["relevant"] + params["wrong"] + params["filler"]
    if corpus < simulations.TOP_K:
        return {"params.filler": [f"The corpus needs at least {simulations.TOP_K} objects."]}
    return {}


def _sweep_tables(params: dict) -> list:
    return [("memory_object", sweep.candidates(namespace_of(params)), "object_id")]


class _RunContexts(threading.local):
    """The streak sessions' contexts of the sweep run whose chunks this thread runs: the
    chunks of one run share them, as the chunks of a sweep in one process do (a session's tags
    and text never change once recorded; the set stays bounded, ``sweep.SessionContexts``);
    a chunk of another run starts afresh."""

    run_id = None
    contexts: sweep.SessionContexts | None = None

    def of(self, run_id) -> sweep.SessionContexts:
        if self.contexts is None or self.run_id != run_id:
            self.run_id, self.contexts = run_id, sweep.SessionContexts()
        return self.contexts


_run_contexts = _RunContexts()


def _sweep_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    # One inner transaction for the whole chunk (its objects are at most chunk_size at plan
    # time): one lock statement and one set of reads per chunk.
    size = max(sweep.CHUNK, int(params.get("chunk_size") or DEFAULT_CHUNK_SIZE))
    result = sweep.sweep(
        namespace=namespace_of(params),
        lo=lo,
        hi=hi,
        chunk_size=size,
        contexts=_run_contexts.of(run_id),
    )
    progress(1.0)
    return result


SWEEP_COUNTS = ("examined", "penalized", "exempt", "not_penalized", "skipped_domain_checks")


def _sweep_merge(parts: list[dict], params: dict) -> dict:
    out = {k: sum(p[k] for p in parts) for k in SWEEP_COUNTS}
    out["namespaces"] = sorted({ns for p in parts for ns in p["namespaces"]})
    return out


def _objects_table(params: dict) -> list:
    ns = namespace_of(params)
    objects = MemoryObject.objects.all()
    if ns is not None:
        objects = objects.filter(namespace=ns)
    return [("memory_object", objects, "pk")]


def _rebuild_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    result = rebuild.rebuild_range(namespace_of(params), lo, hi)
    progress(1.0)
    return result


def _rebuild_merge(parts: list[dict], params: dict) -> dict:
    return {
        "objects": sum(p["objects"] for p in parts),
        "changed": sum(p["changed"] for p in parts),
        "namespace": params.get("namespace"),
    }


def _replay_tables(params: dict) -> list:
    return [(t, *verification.table_keys(t)) for t in verification.REPLAY_TABLES]


def _replay_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    return verification.verify_replay_range(table, lo, hi, progress)


SESSION_TABLE = "feedback_session"


def _chain_tables(params: dict) -> list:
    own = [(t, *verification.table_keys(t)) for t in verification.CHAIN_TABLES]
    return [*own, (SESSION_TABLE, FeedbackSession.objects.all(), "pk")]


def _chain_chunk(params: dict, table: str, lo, hi, progress: Progress, run_id) -> dict:
    if table != SESSION_TABLE:
        return verification.verify_chain_range(table, lo, hi, progress)
    sessions = FeedbackSession.objects.order_by("pk")
    if lo is not None:
        sessions = sessions.filter(pk__gte=lo)
    if hi is not None:
        sessions = sessions.filter(pk__lt=hi)
    heads = sessions.values_list("pk", "head_hash")
    return verification.verify_chain_heads(heads, SESSION_TABLE, progress)


def _verify_merge(parts: list[dict], params: dict) -> dict:
    """Counts summed; mismatches concatenated in chunk order (the order of one whole pass) up
    to the cap; ``ok`` when no chunk found one."""
    count = sum(p["mismatch_count"] for p in parts)
    listed = [m for p in parts for m in p["mismatches"]][: verification.MAX_LISTED]
    return {
        "ok": count == 0,
        "checked": sum(p["checked"] for p in parts),
        "operations": sum(p["operations"] for p in parts),
        "mismatch_count": count,
        "mismatches": listed,
        "truncated": count > len(listed),
    }


def _erasure(params: dict, progress: Progress) -> dict:
    # erasure imports feedback: imported at run time, not at this module's import
    from erasure import services as erasure_services

    return erasure_services.run(params.get("erasure_id"), progress)


def _erasure_check(params: dict) -> dict[str, list[str]]:
    return {"kind": ["An erasure is started with POST /api/v1/erasures."]}


KINDS: dict[str, Kind] = {
    IGNORED_SWEEP: Kind(
        ADMIN_ROLES,
        {"namespace": Param("namespace"), "chunk_size": CHUNK_SIZE},
        chunks=Chunked(_sweep_tables, _sweep_chunk, _sweep_merge, telemetry.SWEEP_DURATION),
    ),
    REBUILD_AGGREGATES: Kind(
        ADMIN_ROLES,
        {"namespace": Param("namespace"), "chunk_size": CHUNK_SIZE},
        chunks=Chunked(_objects_table, _rebuild_chunk, _rebuild_merge, telemetry.REBUILD_DURATION),
    ),
    VERIFY_REPLAY: Kind(
        OPERATOR_ROLES,
        {"chunk_size": CHUNK_SIZE},
        chunks=Chunked(_replay_tables, _replay_chunk, _verify_merge),
    ),
    VERIFY_CHAIN: Kind(
        OPERATOR_ROLES,
        {"chunk_size": CHUNK_SIZE},
        chunks=Chunked(_chain_tables, _chain_chunk, _verify_merge),
    ),
    STABILITY_SIMULATION: Kind(
        OPERATOR_ROLES,
        {
            "seed": SEED,
            "sessions": Param("int", 100, 1, MAX_SESSIONS),
            "corpus_size": Param("int", 60, 1, MAX_CORPUS),
            "injected_per_session": Param("int", 8, 1, 100),
            "streak_threshold": Param("int", 5, 1, 100),
        },
        run=_stability,
        check=_stability_check,
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
        run=_precision,
        check=_precision_check,
    ),
    BENCHMARK_SUITE: Kind(OPERATOR_ROLES, {"seed": SEED}, run=_benchmark),
    METRIC_SNAPSHOT: Kind(OPERATOR_ROLES, {"namespace": Param("namespace")}, run=_metric_snapshot),
    ERASURE: Kind(ADMIN_ROLES, run=_erasure, check=_erasure_check, startable=False),
}


# --- validation ----------------------------------------------------------------------------------


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
    check = KINDS[kind].check
    if not errors and check is not None:
        errors = check(out)
    if errors:
        raise DomainError("validation_error", "The task parameters are invalid.", 400, errors)
    return out


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
