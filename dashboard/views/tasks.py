"""The tasks page: start a run, follow it (polled status), and the ignored sweep's decisions."""

from __future__ import annotations

import uuid
from collections import Counter

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import forms
from dashboard.permissions import OPERATORS, dashboard_view
from dashboard.selectors import tasks as selectors
from dashboard.selectors.objects import objects_by_id
from dashboard.views.common import page_of, redirect_back, run_rows, sort_of
from rms.errors import DomainError
from taskruns.models import TaskRun

TASK_DESCRIPTIONS = {
    "ignored_sweep": "Penalise objects ignored in N relevant sessions in a row (SPEC §9).",
    "rebuild_aggregates": "Recompute every aggregate from the operation log alone (SPEC §8).",
    "verify_replay": "Fold every object's log through the policy and compare each stored state.",
    "verify_chain": "Re-hash every chain and check each head, sessions included.",
    "stability_simulation": "Does the closed loop drive confidence to the extremes? (SPEC §14)",
    "precision_simulation": "Does feedback lift precision@5 from session 1 to 50? (SPEC §14)",
    "benchmark_suite": "RFC-0008 §11 checks: ceiling, session cap, independence, floor, replay.",
}
# --- tasks ---------------------------------------------------------------------------------------


def _taskruns():
    # Imported when used: taskruns pulls in the simulations module.
    from taskruns import kinds

    return kinds


def _task_runs():
    from taskruns import runs

    return runs


def _allowed_kinds(access) -> list[tuple[str, object]]:
    taskruns = _taskruns()
    return [
        (kind, spec)
        for kind, spec in taskruns.KINDS.items()
        if access.role in spec.roles and spec.startable
    ]


@require_GET
@dashboard_view(OPERATORS)
def tasks(request):
    access = request.access
    kinds = _allowed_kinds(access)
    all_kinds = list(_taskruns().KINDS)
    kind = request.GET.get("kind") if request.GET.get("kind") in all_kinds else None
    state = request.GET.get("state") if request.GET.get("state") in TaskRun.STATES else None
    sort, descending = sort_of(request, ("created", "kind", "state", "finished"), "created", True)
    page = page_of(
        request,
        selectors.task_runs(
            kinds=[kind] if kind else None, state=state, sort=sort, descending=descending
        ),
        per_page=25,
    )
    rows = run_rows(page)
    active = [str(r["run"].pk) for r in rows if r["run"].state in (TaskRun.QUEUED, TaskRun.RUNNING)]
    namespaces = list(access.namespaces())
    sweep_ns = None
    if namespaces:
        name = request.GET.get("sweep_namespace")
        sweep_ns = next((n for n in namespaces if n.name == name), namespaces[0])
    decisions = selectors.sweep_decisions(sweep_ns) if sweep_ns else []
    objects = objects_by_id({d["target_id"] for d in decisions})
    for d in decisions:
        d["object"] = objects.get(d["target_id"])
        p = d["payload"] or {}
        exempt = ", ".join(p.get("exemptions") or [])
        d["reasons_text"] = "; ".join(
            [f"exempt: {exempt}"] * bool(exempt) + list(p.get("reasons") or [])
        )
        d["decision"] = "penalised" if p.get("applied") else "exempt" if exempt else "not penalised"
    # The summary above the table counts the rows of the table itself: the decisions come from
    # the sweep after each session as well as from ignored_sweep runs, so a run's own counts
    # would contradict them.
    decided = Counter(d["decision"] for d in decisions)
    forms_ = []
    for k, spec in kinds:
        params = [
            {
                "name": name,
                "type": p.type,
                "default": p.default,
                "min": p.min,
                "max": p.max,
                "step": "any" if p.type == "float" else "1",
            }
            for name, p in spec.params.items()
        ]
        forms_.append({"kind": k, "params": params, "description": TASK_DESCRIPTIONS.get(k, "")})
    context = {
        "kinds": forms_,
        "all_kinds": all_kinds,
        "states": TaskRun.STATES,
        "kind": kind,
        "state": state,
        "sort": sort,
        "descending": descending,
        "page": page,
        "rows": rows,
        "active": active,
        "namespaces": namespaces,
        "sweep_namespace": sweep_ns,
        "decisions": decisions,
        "decided": {
            "penalised": decided["penalised"],
            "exempt": decided["exempt"],
            "not_penalised": decided["not penalised"],
        },
        "is_admin": access.is_admin,
    }
    return render(request, "dashboard/tasks.html", context)


@require_POST
@dashboard_view(OPERATORS)
def task_start(request):
    taskruns = _taskruns()
    access = request.access
    kind = request.POST.get("kind", "")
    fallback = reverse("dashboard:tasks")
    try:
        spec = taskruns.check_kind(access.client, kind)
    except DomainError as exc:
        if exc.status == 403:
            raise PermissionDenied(exc.message) from exc
        messages.error(request, exc.message)
        return redirect_back(request, fallback)
    params, errors = forms.task_params(spec, request.POST)
    if errors:
        for name, error in errors.items():
            messages.error(request, f"{name}: {error}")
        return redirect_back(request, fallback)
    try:
        run = _task_runs().task_start(client=access.client, kind=kind, params=params)
    except DomainError as exc:
        detail = "; ".join(
            f"{k.removeprefix('params.')}: {' '.join(v)}" for k, v in (exc.fields or {}).items()
        )
        messages.error(request, exc.message + (f" {detail}" if detail else ""))
        return redirect_back(request, fallback)
    messages.success(request, f"Started {kind.replace('_', ' ')} ({str(run.pk)[:8]}).")
    return redirect_back(request, fallback)


@require_GET
@dashboard_view(OPERATORS)
def task_status(request):
    """What the tasks page polls while a run is queued or running."""
    ids = []
    for raw in request.GET.getlist("id")[:100]:
        try:
            ids.append(uuid.UUID(raw))
        except ValueError:
            continue
    return JsonResponse({"runs": selectors.task_status(ids)})
