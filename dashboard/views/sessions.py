"""The feedback sessions list and one session's page (SPEC §7)."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from dashboard.permissions import ANY_ROLE, dashboard_view, pick_namespace
from dashboard.selectors import sessions as selectors
from dashboard.views.common import PER_PAGE_CHOICES, page_of, per_page_of, sort_of
from feedback.models import FeedbackSession
from feedback.selectors import (
    records_for_reader,
    visible_session,
)
from otlp import selectors as otlp_selectors

# --- feedback sessions (SPEC §7) ---------------------------------------------------------------


@require_GET
@dashboard_view(ANY_ROLE)
def sessions(request):
    access = request.access
    namespaces = list(access.namespaces())
    ns = pick_namespace(namespaces, request.GET.get("namespace"))
    context = {"namespaces": namespaces, "current": ns, "outcomes": FeedbackSession.OUTCOMES}
    if ns is None:
        return render(request, "dashboard/sessions.html", context)
    sort, descending = sort_of(request, selectors.SESSION_SORTS, "ts", True)
    outcome = request.GET.get("outcome") or None
    if outcome not in (*FeedbackSession.OUTCOMES, "none", None):
        outcome = None
    corrected = {"yes": True, "no": False}.get(request.GET.get("corrected", ""))
    session_id = (request.GET.get("session_id") or "").strip() or None
    qs = selectors.session_rows(
        ns,
        sort=sort,
        descending=descending,
        outcome=outcome,
        corrected=corrected,
        session_id=session_id,
    )
    page = page_of(request, qs)
    rows = list(page.object_list)
    inj, sig = selectors.session_page_counts(
        [r.session_id for r in rows], access.client.namespace_names()
    )
    for r in rows:
        r.inj = inj.get(r.session_id, {})
        r.sig = sig.get(r.session_id, {})
    context.update(
        {
            "page": page,
            "rows": rows,
            "sort": sort,
            "descending": descending,
            "outcome": outcome,
            "corrected": request.GET.get("corrected", ""),
            "session_id": session_id or "",
            "per_page": per_page_of(request),
            "per_page_choices": PER_PAGE_CHOICES,
            "filtered": bool(outcome or corrected is not None or session_id),
        }
    )
    return render(request, "dashboard/sessions.html", context)


@require_GET
@dashboard_view(ANY_ROLE)
def session_detail(request, session_pk):
    session = visible_session(request.access.client, session_pk)
    if session is None:
        raise Http404("No such feedback session.")
    client = request.access.client
    detail = selectors.session_detail(session, client.namespace_names())
    record = records_for_reader(client, [session.record])[0]
    injections = detail.injections
    total_cost = sum(i.token_cost for i in injections)
    context = {
        "session": session,
        "injections": injections,
        "signals": detail.signals,
        "changes": detail.changes,
        "total_cost": total_cost,
        "unused_count": sum(1 for i in injections if i.ended_unused),
        "budget_share": (session.tokens_used / session.context_budget)
        if session.context_budget
        else None,
        "scope": record["namespace_scope"],
        "partial": record.get("partial", False),
        "str_mean": record.get("session_str_mean"),
        "trace_id": otlp_selectors.session_trace_id(session),
    }
    return render(request, "dashboard/session.html", context)
