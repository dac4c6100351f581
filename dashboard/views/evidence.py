"""The evidence page: calibration per extraction context and the detection figures."""

from __future__ import annotations

import json
from functools import cache as memoize
from pathlib import Path

from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.charts import evidence as charts
from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.selectors import evidence as selectors

DETECTION_FIGURES = Path(__file__).resolve().parents[1] / "detection_figures.json"
# --- evidence ------------------------------------------------------------------------------------


@memoize
def detection_figures() -> dict:
    """docs/DETECTION.md's figures, copied into a JSON file beside this module (with their date)."""
    figures = json.loads(DETECTION_FIGURES.read_text())
    for row in figures["by_kind"]:
        row["accuracy"] = row["correct"] / row["n"] if row["n"] else None
    return figures


@require_GET
@dashboard_view(ANY_ROLE)
def evidence(request):
    access = request.access
    namespaces = list(access.namespaces())
    ns = pick_namespace(namespaces, request.GET.get("namespace"))
    rows = selectors.calibration(ns) if ns else []
    for r in rows:
        interval = charts.wilson_interval(r["corroborations"], r["observations"])
        r["low"], r["high"] = interval if interval else (None, None)
    figures = detection_figures()
    context = {
        "namespaces": namespaces,
        "current": ns,
        "rows": rows,
        "has_observations": any(r["observations"] for r in rows),
        "edges": sum(r["edges"] for r in rows),
        "calibration_chart": charts.calibration(rows),
        "detection": figures,
        "detection_chart": charts.detection_sweep(figures["sweep"], figures["threshold"]),
    }
    return render(request, "dashboard/evidence.html", context)
