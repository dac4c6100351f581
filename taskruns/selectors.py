"""Read side of task runs kept outside the API's views: the gauges /metrics reads."""

from __future__ import annotations

from django.db.models import Count

from taskruns.models import TaskRun


def task_run_gauges():
    """``rms_task_runs{kind, state}``: stored task runs, read when /metrics is scraped."""
    from prometheus_client.core import GaugeMetricFamily

    runs = GaugeMetricFamily(
        "rms_task_runs", "Task runs stored, by kind and state.", labels=["kind", "state"]
    )
    rows = TaskRun.objects.values_list("kind", "state").annotate(n=Count("*")).order_by()
    for kind, state, n in rows:
        runs.add_metric([kind, state], n)
    return [runs]
