"""Retry and disabling rules for webhook deliveries (API.md "The closed loop"). Pure.

A delivery is retried after about 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, then hourly, each delay
jittered by ±20 % so endpoints that failed together do not retry in lockstep, until its retry
window (24 h from the first attempt) closes; then it is ``failed``. An endpoint that has had no
success for 24 h while deliveries failed is disabled.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

DEFAULT_SCHEDULE: tuple[float, ...] = (5, 30, 120, 600, 1800, 3600)
JITTER = 0.2
TIMEOUT = 10.0  # seconds: any 2xx within it is success
DISABLE_AFTER = timedelta(hours=24)


def is_success(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def retry_delay(attempts: int, unit_random: float, schedule: Sequence[float] = DEFAULT_SCHEDULE):
    """Seconds before the next attempt after ``attempts`` failed ones (≥ 1), given a uniform
    random number in [0, 1): the schedule's step, hourly (its last step) past its end."""
    base = schedule[min(max(attempts, 1), len(schedule)) - 1]
    return base * (1 - JITTER + 2 * JITTER * unit_random)


def next_attempt(
    *,
    now: datetime,
    attempts: int,
    retry_until: datetime,
    unit_random: float,
    schedule: Sequence[float] = DEFAULT_SCHEDULE,
) -> datetime | None:
    """When to try again after a failure, or None when the retry window has closed (the last
    attempt may fall just past it: a window is "retry until", not "give up early")."""
    if now >= retry_until:
        return None
    return now + timedelta(seconds=retry_delay(attempts, unit_random, schedule))


def should_disable(
    *, failing_since: datetime | None, now: datetime, window: timedelta = DISABLE_AFTER
) -> bool:
    """No success for ``window`` while deliveries kept failing."""
    return failing_since is not None and now - failing_since >= window
