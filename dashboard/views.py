"""Dashboard views (STYLE §9): permission, scoped fetch (404 for what the caller may not see),
selector, chart builder, render. Writes go through the services with the user's ApiClient and a
HUMAN_USER actor; every POST is CSRF-protected and checks the role here, not in the template.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta
from functools import cache as memoize
from pathlib import Path

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from dashboard import charts, forms, selectors, text
from dashboard.permissions import ADMINS, ANY_ROLE, OPERATORS, dashboard_view, pick_namespace
from delivery import selectors as delivery_selectors
from delivery import services as delivery_services
from delivery.models import WebhookDelivery, WebhookEndpoint
from feedback import metrics
from feedback.models import FeedbackSession, TaskRun
from feedback.selectors import REVIEW_MIN_INJECTIONS, REVIEW_USAGE_BELOW, visible_session
from otlp import selectors as otlp_selectors
from rms import events, policy, services
from rms.errors import DomainError, NotFound

PER_PAGE = 50
PER_PAGE_CHOICES = (25, 50, 100, 200)
OP_TYPES = (
    "OBJECT_CREATED",
    "INJECTION_EVENT",
    "FEEDBACK_EVENT",
    "REINFORCE",
    "PENALTY",
    "IGNORED_CHECK",
    "PIN",
    "UNPIN",
    "EPISTEMIC_TRANSITION",
    "CONDITION_CHANGED",
)
SIMULATION_KINDS = ("stability_simulation", "precision_simulation", "benchmark_suite")
TASK_DESCRIPTIONS = {
    "ignored_sweep": "Penalise objects ignored in N relevant sessions in a row (SPEC §9).",
    "rebuild_aggregates": "Recompute every aggregate from the operation log alone (SPEC §8).",
    "verify_replay": "Fold every object's log through the policy and compare each stored state.",
    "verify_chain": "Re-hash every chain and check each head, sessions included.",
    "stability_simulation": "Does the closed loop drive confidence to the extremes? (SPEC §14)",
    "precision_simulation": "Does feedback lift precision@5 from session 1 to 50? (SPEC §14)",
    "benchmark_suite": "RFC-0008 §11 checks: ceiling, session cap, independence, floor, replay.",
}
DETECTION_FIGURES = Path(__file__).resolve().parent / "detection_figures.json"


# --- helpers ------------------------------------------------------------------------------------


def _per_page(request) -> int:
    try:
        value = int(request.GET.get("per_page", PER_PAGE))
    except ValueError:
        return PER_PAGE
    return value if value in PER_PAGE_CHOICES else PER_PAGE


def _page(request, qs, per_page: int | None = None):
    return Paginator(qs, per_page or _per_page(request)).get_page(request.GET.get("page"))


def _sort(request, allowed, default: str, default_desc: bool) -> tuple[str, bool]:
    sort = request.GET.get("sort")
    if sort not in allowed:
        return default, default_desc
    return sort, request.GET.get("dir", "desc" if default_desc else "asc") == "desc"


def _back(request, fallback: str) -> HttpResponseRedirect:
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = fallback
    return HttpResponseRedirect(target)


def _window(request) -> str:
    window = request.GET.get("window", selectors.DEFAULT_WINDOW)
    return window if window in selectors.WINDOWS else selectors.DEFAULT_WINDOW


# --- overview -----------------------------------------------------------------------------------


@require_GET
@dashboard_view(ANY_ROLE)
def overview(request):
    access = request.access
    namespaces = list(access.namespaces())
    window = _window(request)
    context = {"window": window, "windows": list(selectors.WINDOWS), "namespaces": namespaces}
    if not namespaces:
        return render(request, "dashboard/overview.html", context)
    name = request.GET.get("namespace")
    current = pick_namespace(namespaces, name) if name else None

    selectors.mark_overview_viewed()
    health, computed_at = selectors.namespace_health(namespaces, window)
    if current is None:
        # Without a choice, open on the namespace that needs attention.
        current = next((h.namespace for h in health if h.alerts), namespaces[0])
    by_ns = {h.namespace.pk: h for h in health}
    current_health = by_ns[current.pk]
    order = {metrics.STATE_ALERT: 0, metrics.STATE_OK: 1, metrics.STATE_NO_DATA: 2}
    summary = sorted(health, key=lambda h: (order[h.state], h.namespace.name))

    now = timezone.now()
    series = selectors.snapshot_series(current, now - selectors.SNAPSHOT_HISTORY)
    spark = series.since(now - selectors.SPARKLINE_SPAN)
    span = selectors.WINDOWS[window]
    trend = (
        selectors.snapshot_series(current, None, bucket="day")
        if span is None
        else series.since(now - max(span, timedelta(days=1)))
    )
    # The alert records are the one source for "since when": the history card lists them too.
    open_alerts = selectors.open_alerts(current)
    cards = []
    for name_ in metrics.METRIC_NAMES:
        m = current_health.evaluated[name_]
        since, before_history = series.alert_since(name_)
        cards.append(
            {
                "name": name_,
                "label": charts.METRIC_LABELS[name_],
                "definition": metrics.METRIC_DEFINITIONS[name_],
                **m,
                "sparkline": charts.sparkline_path(spark.values.get(name_, []), m["threshold"]),
                "alert_since": since,
                "alert_before_history": before_history,
                "open_alert": open_alerts.get(name_),
            }
        )
    warning_codes = {w["code"] for w in current_health.warnings}
    cannot_fix = [
        {**item, "highlighted": item["code"] in warning_codes}
        for item in metrics.FEEDBACK_CANNOT_FIX
    ]
    hist = selectors.histograms(namespaces, current)
    thresholds = {
        name_: current_health.evaluated[name_]["threshold"] for name_ in metrics.METRIC_NAMES
    }
    context.update(
        {
            "current": current,
            "health": current_health,
            "summary": summary,
            "cards": cards,
            "computed_at": computed_at,
            "cache_seconds": selectors.METRICS_CACHE_SECONDS,
            "warnings": current_health.warnings,
            "cannot_fix": cannot_fix,
            "has_injections": any(hist["usage"]),
            "has_objects": bool(hist["confidence"]),
            "has_snapshots": not trend.empty,
            "trend_bucket": trend.bucket,
            "usage_chart": charts.usage_histogram(hist["usage"], REVIEW_USAGE_BELOW),
            "confidence_chart": charts.confidence_histogram(hist["confidence"]),
            "trend_chart": charts.metric_trends(
                trend.buckets, trend.values, trend.alert, thresholds
            ),
            "review_below": REVIEW_USAGE_BELOW,
            "alert_history": [
                {"alert": a, "label": charts.METRIC_LABELS.get(a.metric, a.metric)}
                for a in selectors.alert_history(current)
            ],
        }
    )
    return render(request, "dashboard/overview.html", context)


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
    sort, descending = _sort(request, selectors.REVIEW_SORTS, selectors.REVIEW_DEFAULT_SORT, False)
    etype = request.GET.get("type") or None
    if etype not in policy.EPISTEMIC_TYPES:
        etype = None
    qs = selectors.review_rows(ns, sort=sort, descending=descending, epistemic_type=etype)
    page = _page(request, qs)
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
            "per_page": _per_page(request),
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
        return _back(request, fallback)
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
    return _back(request, fallback)


# --- one object ---------------------------------------------------------------------------------


def _visible_object(request, object_id):
    obj = selectors.object_for_page(object_id)
    if obj is None or not request.access.can_see(obj.namespace.name):
        raise Http404("No such object.")
    return obj


def describe_op(op) -> dict:
    """Signal and "before → after" of one operation, as the operations table shows them."""
    p = op.payload or {}
    signal = p.get("signal_type") or ""
    before = after = ""
    detail = ""
    if op.op_type == "OBJECT_CREATED":
        after = f"{p.get('epistemic_type', '')} {p.get('confidence', 0):.3f}"
    elif op.op_type in ("REINFORCE", "PENALTY", "PIN", "UNPIN"):
        if p.get("confidence_before") is not None:
            before = f"{p['confidence_before']:.3f}"
            after = f"{p['confidence_after']:.3f}"
        if op.op_type in ("PIN", "UNPIN", "EPISTEMIC_TRANSITION"):
            detail = p.get("reason", "")
    elif op.op_type == "EPISTEMIC_TRANSITION":
        before, after = p.get("from", ""), p.get("to", "")
        detail = p.get("reason", "")
    elif op.op_type == "CONDITION_CHANGED":
        before, after = p.get("from") or "", p.get("to") or ""
    elif op.op_type == "FEEDBACK_EVENT":
        detail = f"{p.get('effect', '')} · {p.get('detection_method', '')}"
    elif op.op_type == "INJECTION_EVENT":
        detail = f"rank {p.get('rank_position') or '—'} · {p.get('token_cost', '?')} tokens"
    elif op.op_type == "IGNORED_CHECK":
        detail = ("penalised" if p.get("applied") else "not penalised") + (
            f" · domain check {p.get('domain_check')}" if p.get("domain_check") else ""
        )
    if op.op_type in ("PIN", "UNPIN"):
        detail = p.get("reason", "")
    return {"signal": signal, "before": before, "after": after, "detail": detail}


@require_GET
@dashboard_view(ANY_ROLE)
def object_detail(request, object_id):
    access = request.access
    obj = _visible_object(request, object_id)
    now = timezone.now()
    aggregate = selectors.object_aggregate(obj)
    state = obj.to_state()

    as_of_raw = request.GET.get("as_of") or ""
    as_of = forms.parse_utc(as_of_raw)
    as_of_view = None
    if as_of_raw and as_of is None:
        messages.error(request, f"“{as_of_raw}” is not a date and time.")
    elif as_of is not None:
        then = selectors.object_as_of(obj, as_of)
        if then is None:
            as_of_view = {"missing": True, "at": as_of}
        else:
            as_of_view = {
                "missing": False,
                "at": as_of,
                "state": then.state,
                "op": then.op,
                "version": then.version,
                "salience_effective": policy.salience_effective(then.state, obj.created_at, as_of),
            }

    points = selectors.trajectory(obj)
    sort, descending = _sort(request, ("seq",), "seq", True)
    op_type = request.GET.get("op") if request.GET.get("op") in OP_TYPES else None
    paginator = Paginator(
        selectors.operations(obj, op_type=op_type, descending=descending),
        _per_page(request) if "per_page" in request.GET else 25,
    )
    if op_type is None:
        # Every operation on the object's chain bumps its version: the count is known.
        paginator.count = obj.version
    page = paginator.get_page(request.GET.get("page"))
    ops = [(op, describe_op(op)) for op in page.object_list]

    relationships = selectors.relationships_of(obj, now)

    context = {
        "obj": obj,
        "state": state,
        "aggregate": aggregate,
        "salience_effective": policy.salience_effective(state, obj.created_at, now),
        "ceiling": policy.ceiling_for(obj.epistemic_type),
        "pin_limit": None
        if obj.epistemic_type == policy.DEPRECATED
        else policy.pin_limit(obj.epistemic_type),
        "deprecated": obj.epistemic_type == policy.DEPRECATED,
        "as_of_raw": as_of_raw,
        "as_of_value": as_of.strftime("%Y-%m-%dT%H:%M:%S") if as_of else "",
        "as_of": as_of_view,
        "trajectory_chart": charts.trajectory(points, obj.created_at, now, as_of),
        "trajectory_points": len(points),
        "trajectory_filtered": obj.version > selectors.TRAJECTORY_ALL_OPS,
        "page": page,
        "ops": ops,
        "op_types": OP_TYPES,
        "op_type": op_type,
        "sort": sort,
        "descending": descending,
        "relationships": relationships,
        "events": selectors.object_events(obj),
        "is_admin": access.is_admin,
    }
    return render(request, "dashboard/object.html", context)


def _object_action(request, object_id, action) -> HttpResponseRedirect:
    fallback = reverse("dashboard:object", args=[object_id])
    form_class = forms.PinForm if action == "pin" else forms.ReasonForm
    form = form_class(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            for error in errors:
                messages.error(request, f"{field}: {error}" if field != "__all__" else error)
        return _back(request, fallback)
    access = request.access
    common = {
        "client": access.client,
        "object_id": object_id,
        "reason": form.cleaned_data["reason"],
        "actor": access.actor,
    }
    try:
        if action == "pin":
            obj = services.object_pin(confidence=form.cleaned_data.get("confidence"), **common)
            done = f"Pinned at confidence {obj.confidence:.3f}."
        elif action == "unpin":
            obj = services.object_unpin(**common)
            done = f"Unpinned; confidence is {obj.confidence:.3f}."
        else:
            obj = services.object_transition(to=policy.DEPRECATED, **common)
            done = "Deprecated."
    except NotFound as exc:
        raise Http404(exc.message) from exc
    except (DomainError, policy.PolicyError) as exc:
        messages.error(request, exc.message)
        return _back(request, fallback)
    messages.success(request, f"{done} “{text.shorten(obj.content, 60)}”")
    return _back(request, fallback)


@require_POST
@dashboard_view(ADMINS)
def object_pin(request, object_id):
    return _object_action(request, object_id, "pin")


@require_POST
@dashboard_view(ADMINS)
def object_unpin(request, object_id):
    return _object_action(request, object_id, "unpin")


@require_POST
@dashboard_view(ADMINS)
def object_deprecate(request, object_id):
    return _object_action(request, object_id, "deprecate")


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
    sort, descending = _sort(request, selectors.SESSION_SORTS, "ts", True)
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
    page = _page(request, qs)
    rows = list(page.object_list)
    inj, sig = selectors.session_page_counts([r.session_id for r in rows])
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
            "per_page": _per_page(request),
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
    detail = selectors.session_detail(session)
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
        "str_mean": session.record.get("session_str_mean")
        if isinstance(session.record, dict)
        else None,
        "trace_id": otlp_selectors.session_trace_id(session),
    }
    return render(request, "dashboard/session.html", context)


# --- tasks ---------------------------------------------------------------------------------------


def _taskruns():
    # Imported when used: feedback.taskruns pulls in the simulations module.
    from feedback.taskruns import kinds

    return kinds


def _task_runs():
    from feedback.taskruns import runs

    return runs


def _allowed_kinds(access) -> list[tuple[str, object]]:
    taskruns = _taskruns()
    return [(kind, spec) for kind, spec in taskruns.KINDS.items() if access.role in spec.roles]


def _run_rows(page) -> list[dict]:
    rows = []
    for run in page.object_list:
        rows.append({"run": run, "summary": selectors.run_summary(run)})
    return rows


@require_GET
@dashboard_view(OPERATORS)
def tasks(request):
    access = request.access
    kinds = _allowed_kinds(access)
    all_kinds = list(_taskruns().KINDS)
    kind = request.GET.get("kind") if request.GET.get("kind") in all_kinds else None
    state = request.GET.get("state") if request.GET.get("state") in TaskRun.STATES else None
    sort, descending = _sort(request, ("created", "kind", "state", "finished"), "created", True)
    page = _page(
        request,
        selectors.task_runs(
            kinds=[kind] if kind else None, state=state, sort=sort, descending=descending
        ),
        per_page=25,
    )
    rows = _run_rows(page)
    active = [str(r["run"].pk) for r in rows if r["run"].state in (TaskRun.QUEUED, TaskRun.RUNNING)]
    namespaces = list(access.namespaces())
    sweep_ns = None
    if namespaces:
        name = request.GET.get("sweep_namespace")
        sweep_ns = next((n for n in namespaces if n.name == name), namespaces[0])
    decisions = selectors.sweep_decisions(sweep_ns) if sweep_ns else []
    objects = selectors.objects_by_id({d["target_id"] for d in decisions})
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
        return _back(request, fallback)
    params, errors = forms.task_params(spec, request.POST)
    if errors:
        for name, error in errors.items():
            messages.error(request, f"{name}: {error}")
        return _back(request, fallback)
    try:
        run = _task_runs().task_start(client=access.client, kind=kind, params=params)
    except DomainError as exc:
        detail = "; ".join(
            f"{k.removeprefix('params.')}: {' '.join(v)}" for k, v in (exc.fields or {}).items()
        )
        messages.error(request, exc.message + (f" {detail}" if detail else ""))
        return _back(request, fallback)
    messages.success(request, f"Started {kind.replace('_', ' ')} ({str(run.pk)[:8]}).")
    return _back(request, fallback)


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


# --- simulations (SPEC §14) ----------------------------------------------------------------------


@require_GET
@dashboard_view(OPERATORS)
def simulations(request):
    sort, descending = _sort(request, ("created", "kind", "state", "finished"), "created", True)
    kind = request.GET.get("kind") if request.GET.get("kind") in SIMULATION_KINDS else None
    page = _page(
        request,
        selectors.task_runs(
            kinds=[kind] if kind else SIMULATION_KINDS, sort=sort, descending=descending
        ),
        per_page=25,
    )
    rows = _run_rows(page)
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


# --- webhooks (admin) -----------------------------------------------------------------------


def _webhooks_context(request) -> dict:
    endpoints = list(delivery_selectors.endpoints_with_stats())
    for endpoint in endpoints:
        endpoint.success_rate = delivery_selectors.success_rate(endpoint)
    by_id = {str(e.pk): e for e in endpoints}
    chosen = by_id.get(request.GET.get("endpoint") or "")
    state = request.GET.get("state")
    state = state if state in WebhookDelivery.STATES else ""
    event_type = request.GET.get("event_type")
    event_type = event_type if event_type in events.EVENT_TYPES else ""
    qs = delivery_selectors.deliveries(
        endpoint=chosen, state=state or None, event_type=event_type or None
    )
    return {
        "endpoints": endpoints,
        "chosen": chosen,
        "state": state,
        "event_type": event_type,
        "states": WebhookDelivery.STATES,
        "event_types": events.EVENT_TYPES,
        "feed_types": events.FEED_TYPES,
        "namespaces": list(request.access.namespaces()),
        "page": _page(request, qs),
        # Where the page's forms come back to: this page (an answer to a POST is the page too).
        "back": request.get_full_path()
        if request.method == "GET"
        else reverse("dashboard:webhooks"),
    }


@require_GET
@dashboard_view(ADMINS)
def webhooks(request):
    return render(request, "dashboard/webhooks.html", _webhooks_context(request))


@require_POST
@dashboard_view(ADMINS)
def webhook_action(request):
    """Create, test, rotate, enable, disable, delete an endpoint, or retry a delivery. A new or
    rotated secret is shown once, in this answer (never stored in a message or a redirect)."""
    action = request.POST.get("action")
    endpoint_id = request.POST.get("endpoint")
    secret = None
    try:
        if action == "create":
            endpoint, secret = delivery_services.endpoint_create(
                created_by=request.access.client.name,
                url=request.POST.get("url", "").strip(),
                namespaces=request.POST.getlist("namespaces"),
                event_types=request.POST.getlist("event_types"),
                description=request.POST.get("description", "").strip(),
            )
            endpoint_id = str(endpoint.pk)
        elif action == "rotate":
            secret = delivery_services.endpoint_rotate_secret(endpoint_id=endpoint_id)
        elif action == "test":
            delivery_services.endpoint_test(endpoint_id=endpoint_id)
            messages.success(request, "Test event queued; it appears in the deliveries below.")
        elif action in ("enable", "disable"):
            state = WebhookEndpoint.ACTIVE if action == "enable" else WebhookEndpoint.DISABLED
            delivery_services.endpoint_update(endpoint_id=endpoint_id, data={"state": state})
            messages.success(request, f"Endpoint {'re-enabled' if state == 'active' else state}.")
        elif action == "delete":
            delivery_services.endpoint_delete(endpoint_id=endpoint_id)
            messages.success(request, "Endpoint deleted.")
        elif action == "retry":
            delivery_services.delivery_retry(
                endpoint_id=endpoint_id, delivery_id=request.POST.get("delivery")
            )
            messages.success(request, "Retry queued.")
        else:
            messages.error(request, "Unknown action.")
    except DomainError as exc:
        detail = "; ".join(m for msgs in (exc.fields or {}).values() for m in msgs)
        messages.error(request, detail or exc.message)
    if secret is None:
        return _back(request, reverse("dashboard:webhooks"))
    context = _webhooks_context(request)
    context.update({"new_secret": secret, "secret_endpoint": endpoint_id})
    return render(request, "dashboard/webhooks.html", context)
