"""SPEC §10 quality metrics, their states and the RFC-0009 §11 warnings."""

import subprocess
import sys
from pathlib import Path

import pytest

from feedback.metrics import (
    DEFAULT_THRESHOLDS,
    DIRECTIONS,
    FEEDBACK_CANNOT_FIX,
    METRIC_NAMES,
    MetricInputs,
    evaluate,
    warnings,
)

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_match_spec():
    assert DEFAULT_THRESHOLDS == {
        "mean_usage_ratio": 0.20,
        "high_correction_rate": 0.10,
        "budget_waste_ratio": 0.30,
        "unused_injection_rate": 0.60,
    }
    assert DIRECTIONS == {
        "mean_usage_ratio": "below",
        "high_correction_rate": "above",
        "budget_waste_ratio": "above",
        "unused_injection_rate": "above",
    }


def test_no_data_is_null_and_no_data_never_zero():
    result = evaluate(MetricInputs())
    assert list(result) == list(METRIC_NAMES)
    for name, metric in result.items():
        assert metric == {
            "value": None,
            "threshold": DEFAULT_THRESHOLDS[name],
            "direction": DIRECTIONS[name],
            "state": "no_data",
        }


def test_values_are_the_spec_ratios():
    result = evaluate(
        MetricInputs(
            usage_ratio_sum=1.5,
            usage_ratio_count=3,
            sessions=8,
            sessions_with_corrected=2,
            wasted_token_cost=100,
            context_budget_total=4000,
            unused_injections=3,
            injections=12,
        )
    )
    assert result["mean_usage_ratio"] == {
        "value": 0.5,
        "threshold": 0.2,
        "direction": "below",
        "state": "ok",
    }
    assert result["high_correction_rate"]["value"] == 0.25
    assert result["high_correction_rate"]["state"] == "alert"
    assert result["budget_waste_ratio"]["value"] == 0.025
    assert result["budget_waste_ratio"]["state"] == "ok"
    assert result["unused_injection_rate"]["value"] == 0.25
    assert result["unused_injection_rate"]["state"] == "ok"


def test_each_metric_has_no_data_on_its_own_zero_denominator():
    result = evaluate(MetricInputs(sessions=4, sessions_with_corrected=0))
    assert result["high_correction_rate"]["value"] == 0.0
    assert result["high_correction_rate"]["state"] == "ok"
    assert result["mean_usage_ratio"]["state"] == "no_data"
    assert result["budget_waste_ratio"]["state"] == "no_data"
    assert result["unused_injection_rate"]["state"] == "no_data"


@pytest.mark.parametrize(
    ("inputs", "name", "state"),
    [
        # "alert when < 0.20": exactly 0.20 is ok.
        (MetricInputs(usage_ratio_sum=0.2, usage_ratio_count=1), "mean_usage_ratio", "ok"),
        (MetricInputs(usage_ratio_sum=0.19, usage_ratio_count=1), "mean_usage_ratio", "alert"),
        # "> 0.10": exactly 1 in 10 is ok.
        (MetricInputs(sessions=10, sessions_with_corrected=1), "high_correction_rate", "ok"),
        (MetricInputs(sessions=10, sessions_with_corrected=2), "high_correction_rate", "alert"),
        (
            MetricInputs(wasted_token_cost=30, context_budget_total=100),
            "budget_waste_ratio",
            "ok",
        ),
        (
            MetricInputs(wasted_token_cost=31, context_budget_total=100),
            "budget_waste_ratio",
            "alert",
        ),
        (MetricInputs(unused_injections=6, injections=10), "unused_injection_rate", "ok"),
        (MetricInputs(unused_injections=7, injections=10), "unused_injection_rate", "alert"),
    ],
)
def test_exactly_at_the_threshold_is_not_an_alert(inputs, name, state):
    assert evaluate(inputs)[name]["state"] == state


def test_namespace_thresholds_override_the_defaults():
    inputs = MetricInputs(unused_injections=7, injections=10)
    result = evaluate(inputs, {"unused_injection_rate": 0.8})
    assert result["unused_injection_rate"]["threshold"] == 0.8
    assert result["unused_injection_rate"]["state"] == "ok"
    assert result["mean_usage_ratio"]["threshold"] == 0.20


def test_unknown_or_invalid_thresholds_are_rejected():
    with pytest.raises(ValueError, match="Unknown metric threshold"):
        evaluate(MetricInputs(), {"precision": 0.5})
    with pytest.raises(ValueError, match="finite"):
        evaluate(MetricInputs(), {"mean_usage_ratio": float("inf")})


def test_no_warnings_when_healthy_or_without_data():
    assert warnings(evaluate(MetricInputs())) == []
    healthy = MetricInputs(
        usage_ratio_sum=0.5,
        usage_ratio_count=1,
        sessions=10,
        sessions_with_corrected=1,
        wasted_token_cost=1,
        context_budget_total=100,
        unused_injections=1,
        injections=10,
    )
    assert warnings(evaluate(healthy)) == []


@pytest.mark.parametrize(
    ("inputs", "code", "fragment"),
    [
        (
            MetricInputs(unused_injections=9, injections=10),
            "model_ignores_context",
            "90% of all injected memories ended unused",
        ),
        (
            MetricInputs(sessions=10, sessions_with_corrected=3),
            "systematic_extraction_errors",
            "30% of feedback sessions",
        ),
        (
            MetricInputs(usage_ratio_sum=0.1, usage_ratio_count=1),
            "memory_never_retrieved",
            "only 10%",
        ),
        (
            MetricInputs(wasted_token_cost=50, context_budget_total=100),
            "budget_waste",
            "50% of the context budget",
        ),
    ],
)
def test_alerting_metric_raises_its_warning(inputs, code, fragment):
    result = warnings(evaluate(inputs))
    assert [w["code"] for w in result] == [code]
    assert set(result[0]) == {"code", "message"}
    assert fragment in result[0]["message"]
    assert result[0]["message"].endswith(".")


def test_several_alerts_raise_several_warnings():
    inputs = MetricInputs(
        usage_ratio_sum=0.05,
        usage_ratio_count=1,
        sessions=10,
        sessions_with_corrected=5,
        unused_injections=9,
        injections=10,
    )
    codes = [w["code"] for w in warnings(evaluate(inputs))]
    assert codes == [
        "model_ignores_context",
        "systematic_extraction_errors",
        "memory_never_retrieved",
    ]


def test_permanent_panel_lists_what_feedback_cannot_fix():
    assert [item["code"] for item in FEEDBACK_CANNOT_FIX] == [
        "systematic_extraction_errors",
        "memory_never_retrieved",
        "model_ignores_context",
    ]
    for item in FEEDBACK_CANNOT_FIX:
        assert set(item) == {"code", "title", "explanation"}
        assert item["title"] and item["explanation"]


def test_module_imports_without_django():
    code = "import sys, feedback.metrics; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
