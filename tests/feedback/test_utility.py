"""SPEC §12 utility, hotness and ranking score: hand-computed values and properties."""

import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedback.utility import (
    DEFAULT_RANK_WEIGHTS,
    HOTNESS_HALF_LIFE_DAYS,
    OUTCOME_REWARDS,
    OUTCOMES,
    UTILITY_START,
    RankWeights,
    hotness,
    is_used,
    rank_score,
    resolve_weights,
    utility_update,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 1, 1, tzinfo=UTC)

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
outcome_or_none = st.sampled_from((*OUTCOMES, None))


def test_constants_match_spec():
    assert UTILITY_START == 0.5
    assert OUTCOME_REWARDS == {"SUCCESS": 1.0, "PARTIAL": 0.5, "FAILED": 0.0}
    assert HOTNESS_HALF_LIFE_DAYS == 7.0
    assert (DEFAULT_RANK_WEIGHTS.similarity, DEFAULT_RANK_WEIGHTS.hotness) == (0.45, 0.30)
    assert DEFAULT_RANK_WEIGHTS.utility == 0.25


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [("SUCCESS", 0.55), ("PARTIAL", 0.5), ("FAILED", 0.45)],
)
def test_used_object_moves_by_ema_of_the_outcome_reward(outcome, expected):
    # 0.9·0.5 + 0.1·reward
    assert utility_update(0.5, True, outcome) == expected


def test_unused_object_is_pulled_toward_0_3_from_above():
    # min(0.5, 0.95·0.5 + 0.05·0.3) = min(0.5, 0.475 + 0.015) = 0.49
    assert utility_update(0.5, False, "SUCCESS") == 0.49
    assert utility_update(0.5, False, "FAILED") == 0.49


def test_unused_object_below_0_3_is_never_pulled_upward():
    # 0.95·0.2 + 0.015 = 0.205 > 0.2: the pull would raise it, so it stays (SPEC §11).
    assert utility_update(0.2, False, "SUCCESS") == 0.2
    assert utility_update(0.0, False, "PARTIAL") == 0.0
    assert utility_update(0.3, False, "SUCCESS") <= 0.3


def test_no_outcome_means_no_change():
    assert utility_update(0.5, True, None) == 0.5
    assert utility_update(0.7, False, None) == 0.7


def test_unknown_outcome_is_an_error():
    with pytest.raises(ValueError, match="Unknown outcome"):
        utility_update(0.5, True, "GREAT")


def test_result_is_clamped_to_unit_interval():
    assert utility_update(1.0, True, "SUCCESS") == 1.0
    assert utility_update(1.2, True, "SUCCESS") == 1.0
    assert utility_update(-0.1, True, "FAILED") == 0.0


def test_only_referenced_confirmed_and_task_completed_count_as_used():
    assert is_used(["REFERENCED"])
    assert is_used(["UNUSED", "CONFIRMED"])
    assert is_used(["TASK_COMPLETED_WITH"])
    assert not is_used(["CORRECTED"])
    assert not is_used(["CORROBORATED_BY_EXTERNAL"])
    assert not is_used(["UNUSED"])
    assert not is_used([])


def test_hotness_without_uses_at_creation_is_one_half():
    assert hotness(0, None, T0, T0) == 0.5


def test_hotness_halves_every_seven_days():
    assert hotness(0, None, T0, T0 + timedelta(days=7)) == pytest.approx(0.25, abs=1e-15)
    assert hotness(0, None, T0, T0 + timedelta(days=14)) == pytest.approx(0.125, abs=1e-15)


def test_hotness_counts_uses_and_days_since_last_use():
    last = T0 + timedelta(days=30)
    # (1 + 2)/(2 + 2) = 0.75, 7 days after the last use, not 37 after creation.
    assert hotness(2, last, T0, last + timedelta(days=7)) == pytest.approx(0.375, abs=1e-15)
    assert hotness(1, last, T0, last) == 2 / 3
    expected = (1 + 3) / (2 + 3) * math.exp(-math.log(2) / 7 * 3.5)
    assert hotness(3, last, T0, last + timedelta(days=3.5)) == expected


def test_hotness_reference_in_the_future_counts_as_zero_days():
    assert hotness(0, T0 + timedelta(days=1), T0, T0) == 0.5


def test_hotness_rejects_negative_uses():
    with pytest.raises(ValueError):
        hotness(-1, None, T0, T0)


def test_rank_score_default_weights():
    assert rank_score(0.8, 0.5, 0.6) == 0.45 * 0.8 + 0.30 * 0.5 + 0.25 * 0.6
    assert rank_score(0.8, 0.5, 0.6) == pytest.approx(0.66, abs=1e-15)
    assert rank_score(1.0, 1.0, 1.0) == pytest.approx(1.0, abs=1e-15)
    assert rank_score(0.0, 0.0, 0.0) == 0.0


def test_rank_score_namespace_weights_override():
    weights = RankWeights(similarity=0.6, hotness=0.2, utility=0.2)
    assert rank_score(0.5, 0.5, 1.0, weights) == 0.6 * 0.5 + 0.2 * 0.5 + 0.2 * 1.0
    # A mapping may override only some weights; the rest keep their defaults.
    assert rank_score(0.5, 0.5, 1.0, {"utility": 0.0}) == 0.45 * 0.5 + 0.30 * 0.5 + 0.0 * 1.0


def test_rank_weights_are_validated():
    with pytest.raises(ValueError, match="Unknown ranking weight"):
        resolve_weights({"recency": 0.1})
    with pytest.raises(ValueError, match="finite number"):
        resolve_weights({"similarity": -0.1})
    with pytest.raises(ValueError, match="finite number"):
        resolve_weights(RankWeights(hotness=float("nan")))


@given(u=unit, used=st.booleans(), outcome=outcome_or_none)
def test_utility_stays_in_unit_interval(u, used, outcome):
    assert 0.0 <= utility_update(u, used, outcome) <= 1.0


@given(u=unit, outcome=outcome_or_none)
def test_not_used_never_raises_utility(u, outcome):
    assert utility_update(u, False, outcome) <= u


@given(u=unit, outcomes=st.lists(outcome_or_none, max_size=50))
def test_injections_alone_never_raise_utility(u, outcomes):
    # SPEC §11: injection frequency is not a quality signal.
    value = u
    for outcome in outcomes:
        new = utility_update(value, False, outcome)
        assert new <= value
        value = new


@given(
    uses=st.integers(min_value=0, max_value=10_000),
    days=st.floats(min_value=0, max_value=3650, allow_nan=False),
)
def test_hotness_is_in_unit_interval_and_below_its_use_factor(uses, days):
    value = hotness(uses, None, T0, T0 + timedelta(days=days))
    assert 0.0 <= value <= (1 + uses) / (2 + uses) < 1.0


def test_module_imports_without_django():
    code = "import sys, feedback.utility; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
