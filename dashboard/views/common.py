"""What several dashboard pages use: pagination, sorting from the query string, the redirect
back after a form, and the rows of a task-runs table.
"""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme

from dashboard.selectors import tasks as selectors

PER_PAGE = 50
PER_PAGE_CHOICES = (25, 50, 100, 200)
# --- helpers ------------------------------------------------------------------------------------


def per_page_of(request) -> int:
    try:
        value = int(request.GET.get("per_page", PER_PAGE))
    except ValueError:
        return PER_PAGE
    return value if value in PER_PAGE_CHOICES else PER_PAGE


def page_of(request, qs, per_page: int | None = None):
    return Paginator(qs, per_page or per_page_of(request)).get_page(request.GET.get("page"))


def sort_of(request, allowed, default: str, default_desc: bool) -> tuple[str, bool]:
    sort = request.GET.get("sort")
    if sort not in allowed:
        return default, default_desc
    return sort, request.GET.get("dir", "desc" if default_desc else "asc") == "desc"


def redirect_back(request, fallback: str) -> HttpResponseRedirect:
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = fallback
    return HttpResponseRedirect(target)


def run_rows(page) -> list[dict]:
    rows = []
    for run in page.object_list:
        rows.append({"run": run, "summary": selectors.run_summary(run)})
    return rows
