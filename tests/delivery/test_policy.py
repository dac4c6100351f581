"""delivery.policy: the retry schedule with its jitter, the retry window and the disabling rule.
Pure: no database, no Django."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delivery import policy
from tests.factories import run_without_django

T0 = datetime(2026, 6, 1, tzinfo=UTC)


def test_retry_policy_schedule_jitter_and_window():
    assert policy.retry_delay(1, 0.5) == 5
    assert policy.retry_delay(2, 0.0) == pytest.approx(24)
    assert policy.retry_delay(3, 0.999999) == pytest.approx(144, rel=1e-5)
    assert policy.retry_delay(6, 0.5) == 3600
    assert policy.retry_delay(40, 0.5) == 3600  # hourly past the schedule
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    until = t0 + timedelta(hours=24)
    assert policy.next_attempt(now=t0, attempts=1, retry_until=until, unit_random=0.5) == (
        t0 + timedelta(seconds=5)
    )
    assert policy.next_attempt(now=until, attempts=30, retry_until=until, unit_random=0.5) is None
    assert policy.should_disable(failing_since=t0, now=until) is True
    assert policy.should_disable(failing_since=t0, now=until - timedelta(seconds=1)) is False
    assert policy.should_disable(failing_since=None, now=until) is False
    assert [policy.is_success(s) for s in (200, 204, 299, 300, 500, None)] == [
        True, True, True, False, False, False,
    ]  # fmt: skip


@given(attempts=st.integers(1, 60), unit=st.floats(0, 1, exclude_max=True))
def test_every_delay_is_its_step_within_twenty_percent(attempts, unit):
    step = policy.DEFAULT_SCHEDULE[min(attempts, len(policy.DEFAULT_SCHEDULE)) - 1]
    delay = policy.retry_delay(attempts, unit)
    assert step * (1 - policy.JITTER) <= delay < step * (1 + policy.JITTER) + 1e-9


def test_delays_grow_with_the_attempts_until_hourly():
    delays = [policy.retry_delay(n, 0.5) for n in range(1, 9)]
    assert delays == [5, 30, 120, 600, 1800, 3600, 3600, 3600]


def test_no_failed_attempt_yet_waits_the_first_step():
    assert policy.retry_delay(0, 0.5) == policy.retry_delay(1, 0.5) == 5
    assert policy.retry_delay(-3, 0.5) == 5


def test_a_schedule_of_its_own_is_followed_and_its_last_step_repeats():
    schedule = (0.05, 0.1, 0.2)
    assert [policy.retry_delay(n, 0.5, schedule) for n in (1, 2, 3, 4, 10)] == [
        0.05, 0.1, 0.2, 0.2, 0.2,
    ]  # fmt: skip


def test_the_last_attempt_may_fall_just_past_the_window():
    until = T0 + timedelta(hours=24)
    just_before = until - timedelta(seconds=1)
    at = policy.next_attempt(now=just_before, attempts=7, retry_until=until, unit_random=0.5)
    assert at == just_before + timedelta(hours=1)  # "retry until", not "give up early"
    assert policy.next_attempt(now=until + timedelta(seconds=1), attempts=7, retry_until=until,
                               unit_random=0.5) is None  # fmt: skip


def test_disabling_takes_a_window_of_its_own():
    window = timedelta(minutes=10)
    assert policy.should_disable(failing_since=T0, now=T0 + window, window=window) is True
    assert policy.should_disable(failing_since=T0, now=T0 + window / 2, window=window) is False


def test_the_policy_imports_without_django():
    run_without_django(
        "from delivery import policy; assert policy.retry_delay(2, 0.5) == 30; "
        "import sys; assert 'django' not in sys.modules"
    )
