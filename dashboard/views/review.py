"""The review queue (SPEC §8) and its bulk deprecate."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import forms
from dashboard.permissions import ADMINS, OPERATORS, dashboard_view, pick_namespace
from dashboard.selectors import review as selectors
from dashboard.views.common import PER_PAGE_CHOICES, page_of, per_page_of, redirect_back, sort_of
from feedback.selectors import (
    REVIEW_MIN_INJECTIONS,
    REVIEW_USAGE_BELOW,
)
from rms import policy, services
from rms.errors import DomainError

# --- review queue (SPEC §8) -------------------------------------------------------------------


@require_GET
@dashboard_view(OPERATORS)
def review(request):
    access = request.access
    namespaces = list(access.namespaces())
    ns = pick_namespace(namespaces, request.GET.get("namespace"))
    context = {"namespaces": namespaces, "current": ns, "types": policy.EPISTEMIC_TYPES[:-1]}
    if ns is None:
        return render(request, "dashboard/review.html", context)
    sort, descending = sort_of(
        request, selectors.REVIEW_SORTS, selectors.REVIEW_DEFAULT_SORT, False
    )
    etype = request.GET.get("type") or None
    if etype not in policy.EPISTEMIC_TYPES:
        etype = None
    qs = selectors.review_rows(ns, sort=sort, descending=descending, epistemic_type=etype)
    page = page_of(request, qs)
    rows = list(page.object_list)
    for o in rows:
        o.tokens_spent = o.aggregate.total_token_cost  # review_queue selects the aggregate
    context.update(
        {
            "page": page,
            "rows": rows,
            "sort": sort,
            "descending": descending,
            "type": etype,
            "per_page": per_page_of(request),
            "per_page_choices": PER_PAGE_CHOICES,
            "review_below": REVIEW_USAGE_BELOW,
            "review_min": REVIEW_MIN_INJECTIONS,
            # Row forms come back here; the object URLs are the fixed ones of API.md, written
            # out in the template rather than reversed three times per row.
            "here": request.get_full_path(),
        }
    )
    return render(request, "dashboard/review.html", context)


@require_POST
@dashboard_view(ADMINS)
def review_deprecate(request):
    """Bulk deprecate: one EPISTEMIC_TRANSITION per object, each its own transaction, so one
    refusal (already DEPRECATED) does not undo the others; every outcome is reported."""
    access = request.access
    form = forms.BulkDeprecateForm(request.POST)
    fallback = reverse("dashboard:review")
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect_back(request, fallback)
    done, refused = 0, []
    for object_id in form.cleaned_data["ids"]:
        try:
            services.object_transition(
                client=access.client,
                object_id=object_id,
                to=policy.DEPRECATED,
                reason=form.cleaned_data["reason"],
                actor=access.actor,
            )
            done += 1
        except (DomainError, policy.PolicyError) as exc:
            refused.append(f"{str(object_id)[:8]}: {exc.message}")
    if done:
        messages.success(request, f"Deprecated {done} object{'s' if done != 1 else ''}.")
    if refused:
        messages.error(request, "Not deprecated — " + "; ".join(refused[:10]))
    return redirect_back(request, fallback)
