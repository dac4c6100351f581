"""The retention page (admin): each namespace's retention period, set here, with its
archive's size and last pass (``feedback.retention``)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.permissions import ADMINS, dashboard_view
from dashboard.views.common import redirect_back
from rms import services
from rms.archive import ArchiveMissing
from rms.archive_verify import archive
from rms.errors import DomainError
from rms.models import ChainCheckpoint


def _row(ns) -> dict:
    row = {"ns": ns, "size": None, "files": 0, "batches": 0, "last_pass": None, "error": ""}
    try:
        manifest = archive(ns.name).manifest()
    except (ArchiveMissing, ValueError) as exc:
        row["error"] = str(exc)
        return row
    row["batches"] = len(manifest["batches"])
    row["files"] = sum(len(b["files"]) + 1 for b in manifest["batches"])
    row["size"] = archive(ns.name).size()
    row["operations"] = sum(b["files"]["operations"]["rows"] for b in manifest["batches"])
    row["last_pass"] = manifest.get("last_pass")
    return row


@require_GET
@dashboard_view(ADMINS)
def retention(request):
    rows = [_row(ns) for ns in request.access.namespaces()]
    return render(
        request,
        "dashboard/retention.html",
        {"rows": rows, "checkpoints": ChainCheckpoint.objects.count()},
    )


@require_POST
@dashboard_view(ADMINS)
def retention_set(request):
    """Set (or clear, with an empty value) a namespace's retention period in days."""
    name = request.POST.get("namespace", "")
    raw = request.POST.get("retention_days", "").strip()
    try:
        days = None if raw == "" else int(raw)
        if days is not None and not 1 <= days <= 36_500:
            raise ValueError
    except ValueError:
        messages.error(request, "Retention must be a whole number of days from 1 to 36500.")
        return redirect_back(request, reverse("dashboard:retention"))
    try:
        services.namespace_set_retention(request.access.client, name, days)
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        kept = "everything is kept" if days is None else f"{days} days"
        messages.success(request, f"Retention of {name}: {kept}.")
    return redirect_back(request, reverse("dashboard:retention"))
