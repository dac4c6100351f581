"""Reads of the tasks and simulations pages: task runs with their result summaries, their
status for polling, the ignored-sweep decisions, and the runs the simulations page charts.
"""

from __future__ import annotations

import contextlib
import json

from django.db.models import F
from django.db.models.fields.json import KT

from rms.models import Namespace, Operation
from taskruns.models import TaskRun

# --- tasks ---------------------------------------------------------------------------------------

#: Result fields shown in the runs table, read from the JSON in SQL so a list of stability runs
#: (each with a long per-session series) does not load the series.
RESULT_SUMMARY_KEYS = (
    "ok",
    "checked",
    "operations",
    "mismatch_count",
    "passed",
    "criterion",
    "seed",
    "precision_at_5_session_1",
    "precision_at_5_session_50",
    "examined",
    "penalized",
    "exempt",
    "not_penalized",
    "skipped_domain_checks",
    "objects",
    "changed",
)


def task_runs(
    *, kinds=None, state: str | None = None, descending: bool = True, sort: str = "created"
):
    qs = TaskRun.objects.defer("result")
    if kinds:
        qs = qs.filter(kind__in=list(kinds))
    if state:
        qs = qs.filter(state=state)
    qs = qs.annotate(**{f"r_{k}": KT(f"result__{k}") for k in RESULT_SUMMARY_KEYS})
    key = {
        "created": "created_at",
        "kind": "kind",
        "state": "state",
        "finished": "finished_at",
    }.get(sort, "created_at")
    order = F(key).desc(nulls_last=True) if descending else F(key).asc(nulls_last=True)
    return qs.order_by(order, "-created_at")


def run_summary(run) -> dict:
    """The summary fields of an annotated run as plain values: ``->>`` gives text on PostgreSQL
    ("true", "0.8") and SQL scalars on SQLite (1 for true)."""
    out = {}
    for key in RESULT_SUMMARY_KEYS:
        raw = getattr(run, f"r_{key}", None)
        if raw is None:
            continue
        if isinstance(raw, str):
            # A plain string (the criterion) is not JSON and stays as it is.
            with contextlib.suppress(ValueError):
                raw = json.loads(raw)
        if key in ("ok", "passed") and isinstance(raw, int):
            raw = bool(raw)
        out[key] = raw
    return out


def task_status(ids: list) -> list[dict]:
    rows = TaskRun.objects.filter(pk__in=ids).values(
        "id", "kind", "state", "progress", "started_at", "finished_at"
    )
    return [
        {
            "id": str(r["id"]),
            "kind": r["kind"],
            "state": r["state"],
            "progress": r["progress"],
            "finished": r["finished_at"] is not None,
        }
        for r in rows
    ]


def sweep_decisions(namespace: Namespace, limit: int = 12) -> list[dict]:
    """The newest IGNORED_CHECK decisions in a namespace (the ``op_ns_type_ts`` index)."""
    rows = (
        Operation.objects.filter(namespace=namespace.name, op_type="IGNORED_CHECK")
        .order_by("-ts", "-seq")
        .values("seq", "ts", "target_id", "payload")[:limit]
    )
    return list(rows)


def simulation_runs(kinds, ids: list) -> list[TaskRun]:
    return list(TaskRun.objects.filter(pk__in=ids, kind__in=list(kinds)))


def latest_runs(kinds) -> dict[str, TaskRun]:
    """The newest succeeded run of each kind, with its result (one query per kind, ≤ 3)."""
    out = {}
    for kind in kinds:
        run = (
            TaskRun.objects.filter(kind=kind, state=TaskRun.SUCCEEDED)
            .order_by("-created_at")
            .first()
        )
        if run is not None:
            out[kind] = run
    return out
