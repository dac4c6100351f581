"""The simulations page (SPEC §14): stability and precision@5 runs side by side."""

from __future__ import annotations

import uuid

from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.charts import simulations as charts
from dashboard.permissions import OPERATORS, dashboard_view
from dashboard.selectors import tasks as selectors
from dashboard.views.common import page_of, run_rows, sort_of
from taskruns.models import TaskRun

SIMULATION_KINDS = ("stability_simulation", "precision_simulation", "benchmark_suite")
# --- simulations (SPEC §14) ----------------------------------------------------------------------


@require_GET
@dashboard_view(OPERATORS)
def simulations(request):
    sort, descending = sort_of(request, ("created", "kind", "state", "finished"), "created", True)
    kind = request.GET.get("kind") if request.GET.get("kind") in SIMULATION_KINDS else None
    page = page_of(
        request,
        selectors.task_runs(
            kinds=[kind] if kind else SIMULATION_KINDS, sort=sort, descending=descending
        ),
        per_page=25,
    )
    rows = run_rows(page)
    selected_ids = []
    for raw in request.GET.getlist("run")[:6]:
        try:
            selected_ids.append(uuid.UUID(raw))
        except ValueError:
            continue
    if selected_ids:
        chosen = selectors.simulation_runs(SIMULATION_KINDS, selected_ids)
        chosen.sort(key=lambda r: selected_ids.index(r.pk))
    else:
        chosen = list(selectors.latest_runs(SIMULATION_KINDS).values())
    chosen = [r for r in chosen if r.state == TaskRun.SUCCEEDED and isinstance(r.result, dict)]
    stability = [r for r in chosen if r.kind == "stability_simulation"]
    precision = [r for r in chosen if r.kind == "precision_simulation"]
    bench = [r for r in chosen if r.kind == "benchmark_suite"]
    stability_views = []
    for k, run in enumerate(stability):
        result = run.result
        stability_views.append(
            {
                "run": run,
                "result": result,
                "chart": charts.stability(result.get("series") or []),
                "chart_id": f"chart-stability-{k}",
            }
        )
    precision_chart = None
    if precision:
        precision_chart = charts.precision(
            [
                (f"seed {r.result.get('seed')} · {str(r.pk)[:6]}", r.result.get("series") or [])
                for r in precision
            ]
        )
    context = {
        "rows": rows,
        "page": page,
        "sort": sort,
        "descending": descending,
        "kind": kind,
        "kinds": SIMULATION_KINDS,
        "selected": {str(r.pk) for r in chosen},
        "explicit": bool(selected_ids),
        "stability": stability_views,
        "precision": precision,
        "precision_chart": precision_chart,
        "bench": bench,
    }
    return render(request, "dashboard/simulations.html", context)
