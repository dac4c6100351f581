"""One object's page and its pin, unpin and deprecate actions."""

from __future__ import annotations

from datetime import datetime

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import forms, text
from dashboard.charts import objects as charts
from dashboard.permissions import ADMINS, ANY_ROLE, dashboard_view
from dashboard.selectors import objects as selectors
from dashboard.views.common import per_page_of, redirect_back, sort_of
from rms import policy, services
from rms import selectors as core
from rms.errors import DomainError, NotFound

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
#: The explanation's series the page can show, with their names on the toggle.
EXPLAIN_SERIES = {"confidence": "Confidence", "salience_effective": "Effective salience"}
#: The steps highlighted in the explanation's table as the biggest movers.
BIGGEST_MOVERS = 3
EXPLAIN_PER_PAGE = 20

# --- one object ---------------------------------------------------------------------------------


def explanation_view(request, obj, at, end: str = "now") -> dict | None:
    """The object's explanation at ``at`` (``rms.selectors.object_explanation``, the one the API
    answers) for the series the page asks for: its waterfall (biggest movers, the rest merged),
    and its steps as a paginated table with the biggest movers flagged."""
    answer = core.object_explanation(obj, at)
    if answer is None:
        return None
    name = request.GET.get("explain")
    name = name if name in EXPLAIN_SERIES else "confidence"
    series = answer[name]
    bars = charts.waterfall_bars(series)
    steps = series["steps"]
    movers = sorted(
        (i for i, s in enumerate(steps) if s["after"] != s["before"]),
        key=lambda i: abs(steps[i]["after"] - steps[i]["before"]),
    )[-BIGGEST_MOVERS:]
    rows = [
        {
            "n": i + 1,
            "step": s,
            "ts": datetime.fromisoformat(s["ts"]),
            "label": charts.step_label(s),
            "controls": charts.controls_text(s),
            "delta": s["after"] - s["before"],
            "mover": i in movers,
        }
        for i, s in enumerate(steps)
    ]
    biggest_first = request.GET.get("wsort") == "change"
    if biggest_first:
        rows.sort(key=lambda r: (-abs(r["delta"]), r["n"]))
    page = Paginator(rows, EXPLAIN_PER_PAGE).get_page(request.GET.get("wpage"))
    return {
        "name": name,
        "title": EXPLAIN_SERIES[name],
        "series_names": EXPLAIN_SERIES,
        "answer": answer,
        "series": series,
        "bars": bars,
        "merged": sum(b["n"] for b in bars if b["merged"]),
        "chart": charts.waterfall(series, bars, EXPLAIN_SERIES[name].lower(), end),
        "page": page,
        "biggest_first": biggest_first,
    }


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
    sort, descending = sort_of(request, ("seq",), "seq", True)
    op_type = request.GET.get("op") if request.GET.get("op") in OP_TYPES else None
    paginator = Paginator(
        selectors.operations(obj, op_type=op_type, descending=descending),
        per_page_of(request) if "per_page" in request.GET else 25,
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
        "signal_totals": selectors.signal_totals(aggregate) if aggregate else [],
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
        "explanation": explanation_view(request, obj, as_of or now, "as of" if as_of else "now"),
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
        return redirect_back(request, fallback)
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
        return redirect_back(request, fallback)
    messages.success(request, f"{done} “{text.shorten(obj.content, 60)}”")
    return redirect_back(request, fallback)


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
