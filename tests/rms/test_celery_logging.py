"""The worker's and beat's INFO lines: an idle housekeeping pass is not logged, work and
failures are (rms.celery.IdleHousekeepingFilter, on Celery's own loggers)."""

from __future__ import annotations

import logging
import uuid

import pytest
from celery import shared_task
from celery.app import trace
from celery.app.trace import build_tracer
from celery.beat import logger as beat_logger
from celery.worker.request import logger as request_logger
from celery.worker.strategy import logger as strategy_logger

from dashboard.tasks import warm_overview
from rms.celery import app


@shared_task(name="tests.echo_for_logging")
def echo(value):
    return value


def run_in_worker(task, *args):
    """The task through Celery's worker tracer (not eager): the code path that logs
    "Task ... succeeded in ...s: <result>"."""
    tracer = build_tracer(task.name, task, app=app, eager=False, propagate=True)
    return tracer(str(uuid.uuid4()), args, {}, {"id": "logging-test"})


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


@pytest.fixture
def info(caplog):
    caplog.set_level(logging.INFO)
    return caplog


def test_an_idle_housekeeping_pass_is_not_logged(info):
    # Nobody watches the overview (no cache key), so the task warms nothing and returns 0.
    assert run_in_worker(warm_overview).retval == 0
    assert not [m for m in lines(info) if "warm_overview" in m]


def test_other_tasks_are_logged_with_their_result(info):
    run_in_worker(echo, 0)
    run_in_worker(echo, {"created": 0})
    succeeded = [m for m in lines(info) if "tests.echo_for_logging" in m and "succeeded" in m]
    assert len(succeeded) == 2
    assert succeeded[0].endswith(": 0")
    assert succeeded[1].endswith(": {'created': 0}")


@pytest.mark.parametrize(
    ("result", "logged"),
    [
        ("{'created': 0, 'claimed': 0, 'finished': 0}", False),
        ("{'created': 3, 'claimed': 3, 'finished': 2}", True),
        ("{'created': 0, 'claimed': 0, 'finished': 10}", True),
        ("{'requeued': 0, 'sent': 1, 'send_failed': 0}", True),
    ],
)
def test_a_pass_that_did_work_is_logged(info, result, logged):
    trace.info(
        trace.LOG_SUCCESS,
        {
            "id": "x",
            "name": "delivery.tasks.dispatch_webhooks",
            "return_value": result,
            "runtime": 0.01,
            "args": "()",
            "kwargs": "{}",
        },
    )
    assert bool([m for m in lines(info) if result in m]) is logged


def test_received_expired_and_beat_lines_of_housekeeping_are_dropped(info):
    for name in ("delivery.tasks.dispatch_webhooks", "feedback.tasks.sweep_all"):
        context = {"id": "x", "name": name, "args": "()", "kwargs": "{}", "eta": None}
        strategy_logger.info(trace.LOG_RECEIVED, context, extra={"data": context})
    due = "Scheduler: Sending due task %s (%s)"
    beat_logger.info(due, "webhook-dispatch", "delivery.tasks.dispatch_webhooks")
    beat_logger.info(due, "ignored-sweep", "feedback.tasks.sweep_all")
    discarding = "Discarding revoked task: %s[%s]"
    request_logger.info(discarding, "delivery.tasks.dispatch_webhooks", "y")
    request_logger.info(discarding, "feedback.tasks.run_task", "z")
    assert lines(info) == [
        "Task feedback.tasks.sweep_all[x] received",
        "Scheduler: Sending due task ignored-sweep (feedback.tasks.sweep_all)",
        "Discarding revoked task: feedback.tasks.run_task[z]",
    ]


def test_a_failing_housekeeping_pass_is_logged(info):
    trace.logger.error(
        "Task %(name)s[%(id)s] raised unexpected: %(exc)s",
        {"name": "delivery.tasks.dispatch_webhooks", "id": "x", "exc": "OperationalError()"},
    )
    assert lines(info) == [
        "Task delivery.tasks.dispatch_webhooks[x] raised unexpected: OperationalError()"
    ]


def test_every_beat_entry_more_frequent_than_a_minute_is_housekeeping(settings):
    """Beat's frequent passes (the webhook dispatcher, the reconciler, the OTLP flush...) would
    write their idle lines every few seconds: each must be named in HOUSEKEEPING_TASKS."""
    from rms.celery import HOUSEKEEPING_TASKS

    frequent = {
        entry["task"]
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if isinstance(entry["schedule"], int | float) and entry["schedule"] < 60
    }
    assert "otlp.tasks.flush_traces" in frequent
    assert frequent <= HOUSEKEEPING_TASKS, frequent - HOUSEKEEPING_TASKS
