"""Suppressed memories: a namespace's eligible objects that decayed below a bar or that no
query can rank into the top k (``feedback.suppression``), with why and a pin for admins."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.views.common import PER_PAGE_CHOICES, per_page_of
from feedback import retrieval, suppression
from feedback.selectors import suppressed as selectors
from rms.errors import DomainError


def _number(request, name: str, default, low, high, cast=float):
    raw = request.GET.get(name)
    if not raw:
        return default, ""
    try:
        value = cast(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        messages.error(request, f"{name} must be a number in [{low}, {high}]; using {default}.")
        return default, raw
    return value, raw


@require_GET
@dashboard_view(ANY_ROLE)
def suppressed(request):
    access = request.access
    namespaces = list(access.namespaces())
    ns = pick_namespace(namespaces, request.GET.get("namespace"))
    salience_below, salience_raw = _number(
        request, "salience_below", suppression.DEFAULT_SALIENCE_BELOW, 0.0, 1.0
    )
    k, k_raw = _number(request, "k", suppression.DEFAULT_K, 1, 100, int)
    context = {
        "namespaces": namespaces,
        "current": ns,
        "salience_below": salience_below,
        "k": k,
        "salience_raw": salience_raw,
        "k_raw": k_raw,
        "default_salience_below": suppression.DEFAULT_SALIENCE_BELOW,
        "default_k": suppression.DEFAULT_K,
        "per_page": per_page_of(request),
        "per_page_choices": PER_PAGE_CHOICES,
        "here": request.get_full_path(),
    }
    if ns is None:
        return render(request, "dashboard/suppressed.html", context)
    try:
        listed = selectors.listing(
            ns, salience_below=salience_below, k=k, refresh=request.GET.get("refresh") == "1"
        )
        page = Paginator(listed.findings, per_page_of(request)).get_page(request.GET.get("page"))
    except DomainError as exc:
        context["profile_error"] = exc.message
        return render(request, "dashboard/suppressed.html", context)
    except selectors.ListingPending as pending:
        # Nothing stored yet for a large namespace: the worker is scoring it; the page reloads.
        context["pending"] = pending.retry_after
        return render(request, "dashboard/suppressed.html", context)
    context.update(
        {
            "now": listed.now,
            "cached": listed.cached,
            "stale": listed.stale,
            "refreshing": listed.refreshing,
            "profile": retrieval.profile_out(listed.profile),
            "page": page,
            "rows": selectors.with_objects(list(page.object_list)),
        }
    )
    return render(request, "dashboard/suppressed.html", context)
