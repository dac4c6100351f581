"""The objects browser: every visible object, filtered, sorted and paged as the API's
``GET /objects``, with bulk pin and deprecate for admins."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import forms, text
from dashboard.permissions import ADMINS, ANY_ROLE, dashboard_view
from dashboard.selectors import browser as selectors
from dashboard.views.common import PER_PAGE_CHOICES, page_of, per_page_of, redirect_back
from feedback.selectors import REVIEW_MIN_INJECTIONS, REVIEW_USAGE_BELOW
from rms import policy, services
from rms.errors import DomainError, Forbidden, NotFound

#: The filters the page shows, in the URL under the API's names.
FILTER_NAMES = (
    "namespace",
    "epistemic_type",
    "pinned",
    "confidence_min",
    "confidence_max",
    "usage_ratio_min",
    "usage_ratio_max",
    "in_alert",
    "q",
)


@require_GET
@dashboard_view(ANY_ROLE)
def browser(request):
    access = request.access
    try:
        query, errors, qs = selectors.browser_rows(access.client, request.GET)
    except Forbidden as exc:
        raise Http404("No such namespace.") from exc
    page = page_of(request, qs)
    rows = list(page.object_list)
    for o in rows:
        # Never injected: no aggregate row yet.
        o.agg = o.aggregate if _has_aggregate(o) else None
    filters = {name: request.GET.get(name, "") for name in FILTER_NAMES}
    context = {
        "namespaces": list(access.namespaces()),
        "types": policy.EPISTEMIC_TYPES,
        "filters": filters,
        "filtered": any(filters.values()),
        "errors": errors,
        "page": page,
        "rows": rows,
        "sort": query.sort,
        "descending": query.descending,
        "per_page": per_page_of(request),
        "per_page_choices": PER_PAGE_CHOICES,
        "review_below": REVIEW_USAGE_BELOW,
        "review_min": REVIEW_MIN_INJECTIONS,
        "here": request.get_full_path(),
        "bulk_max": forms.MAX_BULK,
    }
    return render(request, "dashboard/browser.html", context)


@require_POST
@dashboard_view(ADMINS)
def browser_bulk(request):
    """Pin or deprecate the selected objects with one reason: one operation per object with the
    admin as actor, each in its own transaction (through the services), so one refusal does
    not undo the others; every outcome is reported."""
    access = request.access
    form = forms.BulkActionForm(request.POST)
    fallback = reverse("dashboard:objects")
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect_back(request, fallback)
    action = form.cleaned_data["action"]
    done, refused = [], []
    for object_id in form.cleaned_data["ids"]:
        common = {
            "client": access.client,
            "object_id": object_id,
            "reason": form.cleaned_data["reason"],
            "actor": access.actor,
        }
        try:
            if action == "pin":
                obj = services.object_pin(confidence=None, **common)
            else:
                obj = services.object_transition(to=policy.DEPRECATED, **common)
            done.append(obj)
        except NotFound:
            refused.append(f"{str(object_id)[:8]}: no such object")
        except (DomainError, policy.PolicyError) as exc:
            refused.append(f"{str(object_id)[:8]}: {exc.message}")
    verb = "Pinned" if action == "pin" else "Deprecated"
    if done:
        names = ", ".join(f"“{text.shorten(o.content, 40)}”" for o in done[:5])
        more = f" and {len(done) - 5} more" if len(done) > 5 else ""
        plural = "s" if len(done) != 1 else ""
        messages.success(request, f"{verb} {len(done)} object{plural}: {names}{more}.")
    if refused:
        messages.error(request, f"Not {verb.lower()} — " + "; ".join(refused[:10]))
    return redirect_back(request, fallback)


def _has_aggregate(obj) -> bool:
    try:
        obj.aggregate  # noqa: B018  selected with the row; raises when there is none
    except ObjectDoesNotExist:
        return False
    return True
