"""The erasures page (admin): request an erasure, follow its progress, read the receipts."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard.permissions import ADMINS, dashboard_view
from dashboard.views.common import page_of, redirect_back
from erasure import services as erasure_services
from erasure.models import Erasure
from rms import degraded
from rms.errors import DomainError
from taskruns import runs


def _context(request) -> dict:
    linked = request.access.client.linked_namespace_names
    receipts = Erasure.objects.select_related("namespace").order_by("-requested_at", "-pk")
    if linked:
        receipts = receipts.filter(namespace__name__in=linked)
    return {
        "kinds": Erasure.KINDS,
        "namespaces": list(request.access.namespaces()),
        "page": page_of(request, receipts),
        "unfinished": receipts.exclude(state=Erasure.COMPLETED).exists(),
    }


@require_GET
@dashboard_view(ADMINS)
def erasures(request):
    return render(request, "dashboard/erasures.html", _context(request))


@require_POST
@dashboard_view(ADMINS)
def erasure_request(request):
    body = {
        "subject": {
            "kind": request.POST.get("kind", ""),
            "id": request.POST.get("subject", "").strip() or None,
        },
        "namespace": request.POST.get("namespace", ""),
        "reason": request.POST.get("reason", "").strip(),
    }
    try:
        erasure = erasure_services.request(client=request.access.client, body=body)
        messages.success(request, f"Erasure {erasure.pk} queued; its receipt appears below.")
        for warning in degraded.broker_warnings(runs.send_failed(erasure.task_id)):
            messages.warning(request, warning["message"])
    except DomainError as exc:
        detail = "; ".join(m for msgs in (exc.fields or {}).values() for m in msgs)
        messages.error(request, detail or exc.message)
    return redirect_back(request, reverse("dashboard:erasures"))
