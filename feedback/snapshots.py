"""Metric snapshots: the four metrics of each namespace over a trailing window, stored once a
minute by beat, and the alerts each new snapshot opens or resolves (``feedback.alerts``)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from feedback import alerts, selectors
from feedback.models import MetricSnapshot
from rms.models import Namespace

#: The window of every stored snapshot; the dashboard's trends read snapshots of this window.
SNAPSHOT_WINDOW_HOURS = 24


def take_snapshots(namespace: str | None = None) -> dict:
    """One MetricSnapshot per namespace — the four metrics over the trailing 24 h, as
    ``/metrics?since=<now − 24 h>`` computes them — and the alerts it opens or resolves.

    ``ts`` is the minute, so a redelivered or doubled beat message writes nothing new
    (get_or_create on the unique (namespace, ts, window_hours)); alerts are evaluated only by
    the call that created the snapshot, under the namespace's lock (``alerts.alerts_apply``).
    """
    until = timezone.now().replace(second=0, microsecond=0)
    since = until - timedelta(hours=SNAPSHOT_WINDOW_HOURS)
    namespaces = Namespace.objects.order_by("pk")
    if namespace is not None:
        namespaces = namespaces.filter(name=namespace)
    created = raised = resolved = 0
    for ns in namespaces.iterator():
        if MetricSnapshot.objects.filter(
            namespace=ns, ts=until, window_hours=SNAPSHOT_WINDOW_HOURS
        ).exists():
            continue
        evaluated = selectors.namespace_metrics(ns, since, until)
        _, new = MetricSnapshot.objects.get_or_create(
            namespace=ns,
            ts=until,
            window_hours=SNAPSHOT_WINDOW_HOURS,
            defaults={"metrics": evaluated["metrics"], "warnings": evaluated["warnings"]},
        )
        if not new:
            continue
        created += 1
        counts = alerts.alerts_apply(
            namespace_id=ns.pk, evaluated=evaluated["metrics"], window=evaluated["window"], at=until
        )
        raised += counts.raised
        resolved += counts.resolved
    return {"snapshots": created, "alerts_raised": raised, "alerts_resolved": resolved}
