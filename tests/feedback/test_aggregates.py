"""SPEC §8 aggregates: the signal sets come from the policy's table, and each moves what §8 says."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from feedback import aggregates
from feedback.aggregates import Aggregate, on_session_end, on_signal

ROOT = Path(__file__).resolve().parents[2]
TS = datetime(2026, 5, 1, 12, tzinfo=UTC)


def test_the_signal_sets_are_the_kinds_of_spec_section_2():
    assert set(aggregates.POSITIVE) == {
        "REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORROBORATED_BY_EXTERNAL",
    }  # fmt: skip
    assert set(aggregates.NEGATIVE) == {
        "CORRECTED", "CONTRADICTED_BY_OBSERVATION", "TASK_FAILED_WITH", "IGNORED_REPEATEDLY",
    }  # fmt: skip
    assert aggregates.signals_of_kind("neutral") == {"UNUSED"}


@pytest.mark.parametrize(
    ("signal_type", "positive", "negative"),
    [
        ("CORROBORATED_BY_EXTERNAL", TS, None),  # positive without a total of its own
        ("REFERENCED", TS, None),
        ("IGNORED_REPEATEDLY", None, TS),
        ("TASK_FAILED_WITH", None, TS),
        ("UNUSED", None, None),
    ],
)
def test_last_positive_and_negative_follow_the_kind(signal_type, positive, negative):
    agg = Aggregate(unused_streak=3)
    on_signal(agg, signal_type, "unused", 0.0, TS)
    assert (agg.last_positive_signal, agg.last_negative_signal) == (positive, negative)
    # any signal but UNUSED ends the streak (§8)
    assert agg.unused_streak == (3 if signal_type == "UNUSED" else 0)


def test_totals_and_lifetime_sums():
    agg = Aggregate()
    on_signal(agg, "CONFIRMED", "reinforced", 0.15, TS)
    on_signal(agg, "CORROBORATED_BY_EXTERNAL", "reinforced", 0.05, TS)
    on_signal(agg, "CORRECTED", "penalized", 0.25, TS)
    on_signal(agg, "UNUSED", "unused", 0.0, TS)
    assert (agg.total_confirmed, agg.total_corrected, agg.total_unused) == (1, 1, 1)
    assert agg.total_referenced == agg.total_task_completed == 0
    assert agg.lifetime_gamma_applied == 0.15 + 0.05
    assert agg.lifetime_delta_applied == 0.25


def test_a_session_of_only_unused_grows_the_streak_and_a_use_counts():
    agg = Aggregate()
    on_session_end(agg, signal_types=["UNUSED"], outcome=None, ts=TS)
    assert (agg.unused_streak, agg.unused_sessions, agg.uses) == (1, 1, 0)
    on_session_end(agg, signal_types=["REFERENCED"], outcome="SUCCESS", ts=TS)
    assert (agg.uses, agg.last_use_at, agg.utility) == (1, TS, 0.9 * 0.5 + 0.1 * 1.0)


def test_module_imports_without_django():
    code = "import sys, feedback.aggregates; assert 'django' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
