"""SPEC §14 simulations: verdicts on the default seed, reproducibility, sensitivity."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import feedback.simulations.stability as simulations
from feedback.simulations import (
    DEFAULT_SEED,
    confidence_distribution,
    exact_checks,
    precision_simulation,
    stability_simulation,
    stability_verdict,
)
from rms.policy import SIGNALS, apply_signal, ceiling_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stability():
    return stability_simulation()


@pytest.fixture(scope="module")
def precision():
    return precision_simulation()


@pytest.fixture(scope="module")
def checks():
    return exact_checks()


def test_results_are_json_serialisable(stability, precision, checks):
    for result in (stability, precision):
        json.dumps(result, allow_nan=False)
        assert result["seed"] == DEFAULT_SEED
    json.dumps(checks, allow_nan=False)


# --- stability ------------------------------------------------------------------------------------


def test_stability_passes_on_the_default_seed(stability):
    assert stability["passed"] is True
    assert "0.02" in stability["criterion"]
    assert len(stability["series"]) == 100
    assert stability["max_extreme_share"] < 0.5


def test_stability_series_reports_the_distribution_per_session(stability):
    for number, point in enumerate(stability["series"], start=1):
        assert point["session"] == number
        assert sum(point["histogram"]) == stability["parameters"]["corpus_size"]
        assert point["min"] <= point["p10"] <= point["p50"] <= point["p90"] <= point["max"]
        assert point["min"] <= point["mean"] <= point["max"]
        assert point["min"] >= 0.0
        assert point["max"] <= 0.97


def test_stability_is_reproducible_and_seed_dependent(stability):
    assert stability_simulation() == stability
    other = stability_simulation(DEFAULT_SEED + 1)
    assert other["seed"] == DEFAULT_SEED + 1
    assert other["series"] != stability["series"]


def test_stability_criterion_catches_a_policy_that_saturates(monkeypatch):
    # An all-or-nothing policy (any positive → ceiling, any negative → 0) collapses to the
    # extremes; the criterion must notice, or the passing verdict above means nothing.
    def saturating(state, signal, tally):
        outcome = apply_signal(state, signal, tally)
        kind = SIGNALS[signal.signal_type].kind
        if kind == "positive" and outcome.effect == "reinforced":
            ceiling = ceiling_for(state.epistemic_type)
            return replace(outcome, state=replace(outcome.state, confidence=ceiling))
        if kind == "negative":
            return replace(outcome, state=replace(outcome.state, confidence=0.0))
        return outcome

    monkeypatch.setattr(simulations, "apply_signal", saturating)
    result = stability_simulation()
    assert result["passed"] is False
    assert result["max_extreme_share"] >= 0.5


def test_confidence_distribution_quantiles_and_extremes():
    point = confidence_distribution([0.0, 0.25, 0.5, 0.75, 0.96], [0.97] * 5)
    assert point["histogram"] == [1, 0, 1, 0, 0, 1, 0, 1, 0, 1]
    assert (point["min"], point["p50"], point["max"]) == (0.0, 0.5, 0.96)
    assert point["p10"] == pytest.approx(0.1)
    assert point["p90"] == pytest.approx(0.876)
    assert point["mean"] == pytest.approx(0.492)
    # 0.0 is within 0.02 of 0 and 0.96 within 0.02 of the ceiling 0.97.
    assert point["extreme_share"] == 2 / 5


def test_stability_verdict_fails_on_collapse_or_no_spread():
    healthy = {"extreme_share": 0.1, "spread": 0.3}
    assert stability_verdict([healthy])[0] is True
    assert stability_verdict([{"extreme_share": 0.5, "spread": 0.3}, healthy])[0] is False
    assert stability_verdict([healthy, {"extreme_share": 0.0, "spread": 0.05}])[0] is False
    assert stability_verdict([])[0] is False


# --- precision@5 ----------------------------------------------------------------------------------


def test_precision_improves_from_session_1_to_50_on_the_default_seed(precision):
    assert precision["precision_at_5_session_50"] > precision["precision_at_5_session_1"]
    assert precision["passed"] is True
    assert len(precision["series"]) == 50
    assert precision["series"][0]["precision_at_5"] == precision["precision_at_5_session_1"]
    assert precision["series"][49]["precision_at_5"] == precision["precision_at_5_session_50"]


def test_known_wrong_objects_start_in_the_top_5(precision):
    first = precision["series"][0]
    assert first["wrong_in_top5"] == precision["parameters"]["wrong"] == 4
    assert all(object_id.startswith("wrong-") for object_id in first["top5"][:4])


def test_feedback_lowers_the_wrong_objects_and_raises_the_right_ones(precision):
    first, last = precision["series"][0], precision["series"][-1]
    assert last["mean_confidence_wrong"] < first["mean_confidence_wrong"]
    assert last["mean_confidence_relevant"] > first["mean_confidence_relevant"]
    assert last["mean_utility_wrong"] < 0.5 < last["mean_utility_relevant"]


def test_precision_is_reproducible_and_seed_dependent(precision):
    assert precision_simulation() == precision
    assert precision_simulation(DEFAULT_SEED + 1)["series"] != precision["series"]


def test_precision_with_fewer_than_50_sessions_has_no_session_50_value():
    result = precision_simulation(sessions=10)
    assert result["precision_at_5_session_50"] is None
    assert result["passed"] is False
    assert len(result["series"]) == 10


# --- RFC-0008 §11 benchmark suite: the exact checks (the replay check: test_suite.py) ----------


def test_exact_checks_pass(checks):
    assert [check["name"] for check in checks] == [
        "asymptote",
        "session_cap",
        "independence_discount",
        "corrected_floor",
    ]
    assert all(check["passed"] for check in checks)


def test_exact_check_measurements(checks):
    measured = {check["name"]: check["measured"] for check in checks}
    assert measured["asymptote"]["OBSERVED"]["max_confidence"] == 0.97
    assert measured["session_cap"]["sum_gamma_effective"] == pytest.approx(0.40, abs=1e-12)
    independence = measured["independence_discount"]
    assert independence["agent_no_evidence"]["gamma_effective"] == pytest.approx(0.06)
    assert independence["agent_shared_evidence"]["gamma_effective"] == pytest.approx(0.06)
    assert independence["agent_disjoint_evidence"]["gamma_effective"] == 0.15
    assert independence["human_user"]["gamma_effective"] == 0.15
    assert measured["corrected_floor"]["min_confidence"] == 0.05
    assert measured["corrected_floor"]["single_from_0_03"] == 0.03


def test_exact_checks_are_reproducible(checks):
    assert exact_checks() == checks


# --- progress -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run",
    [
        lambda progress: stability_simulation(sessions=10, progress=progress),
        lambda progress: precision_simulation(sessions=10, progress=progress),
        lambda progress: exact_checks(progress=progress),
    ],
)
def test_progress_is_reported_up_to_one(run):
    seen: list[float] = []
    run(seen.append)
    assert seen
    assert seen == sorted(seen)
    assert all(0.0 < fraction <= 1.0 for fraction in seen)
    assert seen[-1] == 1.0


def test_invalid_parameters_are_rejected():
    with pytest.raises(ValueError):
        stability_simulation(sessions=0)
    with pytest.raises(ValueError):
        stability_simulation(corpus_size=5, injected_per_session=6)
    with pytest.raises(ValueError):
        precision_simulation(relevant=1, wrong=1, filler=1)


def test_module_imports_without_django():
    code = (
        "import sys, feedback.simulations; assert 'django' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
