"""Feedback quality metrics and what feedback cannot fix (SPEC §10, RFC-0009 §9 and §11).

Pure: the selector gathers the raw sums and counts for a namespace and window into
:class:`MetricInputs`; :func:`evaluate` turns them into the API shape and :func:`warnings` into the
dashboard's warnings. No Django import.

A metric whose denominator is zero has no data: its value is ``None`` and its state ``no_data``,
never 0, because "nothing was measured" and "measured and perfect" must not look alike (SPEC §10).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

MEAN_USAGE_RATIO = "mean_usage_ratio"
HIGH_CORRECTION_RATE = "high_correction_rate"
BUDGET_WASTE_RATIO = "budget_waste_ratio"
UNUSED_INJECTION_RATE = "unused_injection_rate"
METRIC_NAMES = (MEAN_USAGE_RATIO, HIGH_CORRECTION_RATE, BUDGET_WASTE_RATIO, UNUSED_INJECTION_RATE)

#: The window a metric is read over when none is asked for: the trailing 24 h, the same window
#: the metric snapshots raise alerts on and the dashboard's overview opens with, so the API, the
#: alerts and the overview never disagree about one namespace's health.
DEFAULT_WINDOW_HOURS = 24


def window_or_default(
    since: datetime | None, until: datetime | None, now: datetime
) -> tuple[datetime | None, datetime | None]:
    """The window asked for, or with neither bound the trailing :data:`DEFAULT_WINDOW_HOURS`
    up to ``now``."""
    if since is None and until is None:
        return now - timedelta(hours=DEFAULT_WINDOW_HOURS), now
    return since, until


BELOW = "below"
ABOVE = "above"
STATE_OK = "ok"
STATE_ALERT = "alert"
STATE_NO_DATA = "no_data"

#: Default thresholds (per namespace; RFC-0009 §9 calls them hypotheses to calibrate).
DEFAULT_THRESHOLDS: dict[str, float] = {
    MEAN_USAGE_RATIO: 0.20,
    HIGH_CORRECTION_RATE: 0.10,
    BUDGET_WASTE_RATIO: 0.30,
    UNUSED_INJECTION_RATE: 0.60,
}
#: "below": alert when value < threshold; "above": alert when value > threshold. Exactly at the
#: threshold is never an alert (SPEC §10 says "< 0.20", "> 0.10").
DIRECTIONS: dict[str, str] = {
    MEAN_USAGE_RATIO: BELOW,
    HIGH_CORRECTION_RATE: ABOVE,
    BUDGET_WASTE_RATIO: ABOVE,
    UNUSED_INJECTION_RATE: ABOVE,
}

#: Retrieval quality (docs/METRICS.md) alerts like the four metrics, over the same trailing
#: window, on the namespace's chain: the share of sessions with a used injection, and the
#: precision of rank 1 (used injections at rank 1 / injections at rank 1). Both "below".
RETRIEVAL_HIT_RATE = "retrieval_hit_rate"
RETRIEVAL_PRECISION_AT_1 = "retrieval_precision_at_1"
RETRIEVAL_METRIC_NAMES = (RETRIEVAL_HIT_RATE, RETRIEVAL_PRECISION_AT_1)
RETRIEVAL_DEFAULT_THRESHOLDS: dict[str, float] = {
    RETRIEVAL_HIT_RATE: 0.50,
    RETRIEVAL_PRECISION_AT_1: 0.30,
}
#: Every metric that raises alerts, in the order a snapshot writes its operations.
ALERT_METRIC_NAMES = METRIC_NAMES + RETRIEVAL_METRIC_NAMES
ALERT_DIRECTIONS: dict[str, str] = {**DIRECTIONS, **dict.fromkeys(RETRIEVAL_METRIC_NAMES, BELOW)}
#: Objects whose lifetime usage_ratio is below this waste the budget they are injected into.
WASTE_USAGE_RATIO = 0.05

#: Human-readable definitions for the dashboard (SPEC §10 table).
METRIC_DEFINITIONS: dict[str, str] = {
    MEAN_USAGE_RATIO: "Mean usage ratio over active objects with at least one injection.",
    HIGH_CORRECTION_RATE: "Share of feedback sessions with at least one CORRECTED signal.",
    BUDGET_WASTE_RATIO: (
        "Token cost of injections of objects whose usage ratio is below 0.05, "
        "divided by the total context budget."
    ),
    UNUSED_INJECTION_RATE: "Share of injections that ended UNUSED.",
    RETRIEVAL_HIT_RATE: "Share of feedback sessions with at least one used injection.",
    RETRIEVAL_PRECISION_AT_1: "Used injections at rank 1 / injections at rank 1.",
}


@dataclass(frozen=True)
class MetricInputs:
    """Raw sums and counts for one namespace and window (SPEC §10).

    Sessions and injections are filtered by ``ts``; usage ratios are the objects' lifetime values.
    """

    #: Σ usage_ratio and count over active objects with ≥ 1 injection.
    usage_ratio_sum: float = 0.0
    usage_ratio_count: int = 0
    #: Feedback sessions, and those with ≥ 1 CORRECTED signal.
    sessions: int = 0
    sessions_with_corrected: int = 0
    #: Σ token_cost of injections of objects with usage_ratio < 0.05, and Σ context_budget.
    wasted_token_cost: float = 0.0
    context_budget_total: float = 0.0
    #: Injections that ended UNUSED, and all injections.
    unused_injections: int = 0
    injections: int = 0


def resolve_thresholds(thresholds: Mapping[str, float] | None) -> dict[str, float]:
    """Namespace thresholds over the defaults (of every alerting metric); unknown names are an
    error, not silently ignored."""
    resolved = {**DEFAULT_THRESHOLDS, **RETRIEVAL_DEFAULT_THRESHOLDS}
    if thresholds:
        unknown = set(thresholds) - set(ALERT_METRIC_NAMES)
        if unknown:
            raise ValueError(f"Unknown metric threshold(s): {sorted(unknown)}.")
        for name, value in thresholds.items():
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"Threshold for {name} must be a finite number.")
            resolved[name] = value
    return resolved


def _ratio(numerator: float, denominator: float) -> float | None:
    if denominator <= 0:
        return None
    return float(numerator) / float(denominator)


def _state(value: float | None, threshold: float, direction: str) -> str:
    if value is None:
        return STATE_NO_DATA
    alert = value < threshold if direction == BELOW else value > threshold
    return STATE_ALERT if alert else STATE_OK


def evaluate(raw: MetricInputs, thresholds: Mapping[str, float] | None = None) -> dict[str, dict]:
    """Each metric as ``{"value", "threshold", "direction", "state"}`` (SPEC §10).

    Metrics come in the fixed order of :data:`METRIC_NAMES`.
    """
    resolved = resolve_thresholds(thresholds)
    values: dict[str, float | None] = {
        MEAN_USAGE_RATIO: _ratio(raw.usage_ratio_sum, raw.usage_ratio_count),
        HIGH_CORRECTION_RATE: _ratio(raw.sessions_with_corrected, raw.sessions),
        BUDGET_WASTE_RATIO: _ratio(raw.wasted_token_cost, raw.context_budget_total),
        UNUSED_INJECTION_RATE: _ratio(raw.unused_injections, raw.injections),
    }
    return {
        name: {
            "value": values[name],
            "threshold": resolved[name],
            "direction": DIRECTIONS[name],
            "state": _state(values[name], resolved[name], DIRECTIONS[name]),
        }
        for name in METRIC_NAMES
    }


def evaluate_retrieval(
    answer: Mapping, thresholds: Mapping[str, float] | None = None
) -> dict[str, dict]:
    """The retrieval metrics that alert, from a ``retrieval_quality.evaluate`` answer, in the
    shape of :func:`evaluate`. No session (or no injection at rank 1) is ``no_data``."""
    resolved = resolve_thresholds(thresholds)
    values = {
        RETRIEVAL_HIT_RATE: answer.get("hit_rate"),
        RETRIEVAL_PRECISION_AT_1: answer.get("precision_at_rank", {}).get("1"),
    }
    return {
        name: {
            "value": values[name],
            "threshold": resolved[name],
            "direction": BELOW,
            "state": _state(values[name], resolved[name], BELOW),
        }
        for name in RETRIEVAL_METRIC_NAMES
    }


# --- RFC-0009 §11: what feedback cannot fix -------------------------------------------------------
SYSTEMATIC_EXTRACTION_ERRORS = "systematic_extraction_errors"
MEMORY_NEVER_RETRIEVED = "memory_never_retrieved"
MODEL_IGNORES_CONTEXT = "model_ignores_context"
BUDGET_WASTE = "budget_waste"

#: The permanent dashboard panel (SPEC §10): always shown, whatever the metrics say.
FEEDBACK_CANNOT_FIX: tuple[dict[str, str], ...] = (
    {
        "code": SYSTEMATIC_EXTRACTION_ERRORS,
        "title": "Systematic extraction errors",
        "explanation": (
            "If the extraction pipeline keeps misclassifying one kind of statement, every new "
            "memory it writes is wrong in the same way. Feedback only corrects objects one by "
            "one, after a user has been misled, and it learns faithfully from whatever the "
            "pipeline produces. Fix the extraction rules, not the objects."
        ),
    },
    {
        "code": MEMORY_NEVER_RETRIEVED,
        "title": "Memory that is never retrieved",
        "explanation": (
            "Feedback only sees objects that were injected into a model's context. A memory "
            "that should have been retrieved but was not produces no signal at all, so the loop "
            "cannot notice or repair it. Only proactive retrieval evaluations with known-relevant "
            "queries find these gaps."
        ),
    },
    {
        "code": MODEL_IGNORES_CONTEXT,
        "title": "A model that ignores its context",
        "explanation": (
            "If the model answers from its own parametric knowledge instead of the injected "
            "memory, feedback records UNUSED signals and may penalize good objects, but it cannot "
            "make the model read its context. That is a prompt or model alignment problem."
        ),
    },
)


def _pct(value: float | None) -> str:
    return "no data" if value is None else f"{value:.0%}"


def _alerting(evaluated: Mapping[str, Mapping], name: str) -> bool:
    metric = evaluated.get(name)
    return bool(metric) and metric.get("state") == STATE_ALERT


def warnings(evaluated: Mapping[str, Mapping]) -> list[dict[str, str]]:
    """Warnings for the dashboard when the metrics point at something feedback cannot fix.

    Takes the output of :func:`evaluate`. Only metrics in the alert state raise a warning; a
    metric with no data raises none (absence of evidence is not a problem to report).
    """
    out: list[dict[str, str]] = []
    unused = evaluated.get(UNUSED_INJECTION_RATE, {}).get("value")
    usage = evaluated.get(MEAN_USAGE_RATIO, {}).get("value")
    corrected = evaluated.get(HIGH_CORRECTION_RATE, {}).get("value")
    waste = evaluated.get(BUDGET_WASTE_RATIO, {}).get("value")

    if _alerting(evaluated, UNUSED_INJECTION_RATE):
        # Across all objects, not one object: a single ignored object is the IGNORED_REPEATEDLY
        # sweep's business; most injections going unused points at the model or the retrieval.
        out.append(
            {
                "code": MODEL_IGNORES_CONTEXT,
                "message": (
                    f"{_pct(unused)} of all injected memories ended unused. When most injections "
                    "go unused across all objects, the model is probably ignoring its context, "
                    "or retrieval is injecting the wrong objects. Feedback can only record these "
                    "as UNUSED; check the prompt and model, and the retrieval query."
                ),
            }
        )
    if _alerting(evaluated, HIGH_CORRECTION_RATE):
        out.append(
            {
                "code": SYSTEMATIC_EXTRACTION_ERRORS,
                "message": (
                    f"Users corrected the memory in {_pct(corrected)} of feedback sessions. "
                    "If the corrections keep hitting the same kind of statement, the extraction "
                    "pipeline is likely making a systematic error. Feedback lowers each wrong "
                    "object only after it has misled someone; review the extraction rules."
                ),
            }
        )
    if _alerting(evaluated, MEAN_USAGE_RATIO):
        out.append(
            {
                "code": MEMORY_NEVER_RETRIEVED,
                "message": (
                    f"On average only {_pct(usage)} of an object's injections are used. "
                    "Retrieval is probably ranking the wrong objects first, and the memory the "
                    "model needs may never be retrieved at all. Feedback only sees what was "
                    "injected, so it cannot find missing memory; run a retrieval evaluation "
                    "with known-relevant queries."
                ),
            }
        )
    if _alerting(evaluated, BUDGET_WASTE_RATIO):
        out.append(
            {
                "code": BUDGET_WASTE,
                "message": (
                    f"{_pct(waste)} of the context budget went to memories that are almost "
                    "never used (usage ratio below 5%). Feedback lowers these objects only "
                    "slowly; review the review queue and the retrieval cut-off so the budget "
                    "goes to memory that helps."
                ),
            }
        )
    return out


# --- alerts (API.md "The closed loop") -----------------------------------------------------------


@dataclass(frozen=True)
class AlertChange:
    """One crossing at a snapshot: a metric entering ``alert`` (raise) or leaving it (resolve)."""

    metric: str
    raise_: bool
    value: float | None
    threshold: float


def alert_changes(evaluated: Mapping[str, Mapping], open_metrics: set[str]) -> list[AlertChange]:
    """What one snapshot opens and resolves: a metric in ``alert`` without an open alert opens
    one; a metric back to ``ok`` with one resolves it; ``no_data`` does neither (nothing was
    measured, so nothing crossed). In ALERT_METRIC_NAMES order, so a snapshot's operations are
    too."""
    changes = []
    for name in ALERT_METRIC_NAMES:
        metric = evaluated.get(name)
        if metric is None:
            continue
        state = metric["state"]
        if state == STATE_ALERT and name not in open_metrics:
            changes.append(AlertChange(name, True, metric["value"], metric["threshold"]))
        elif state == STATE_OK and name in open_metrics:
            changes.append(AlertChange(name, False, metric["value"], metric["threshold"]))
    return changes
