"""Metric snapshots: the four metrics of each namespace over a trailing window, stored once a
minute by beat, and the alerts each new snapshot opens or resolves (``feedback.alerts``)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from feedback import alerts, metrics, selectors
from feedback.models import MetricSnapshot
from rms.models import Namespace

#: The window of every stored snapshot; the dashboard's trends read snapshots of this window.
SNAPSHOT_WINDOW_HOURS = metrics.DEFAULT_WINDOW_HOURS


def take_snapshots(namespace: str | None = None) -> dict:
    """One MetricSnapshot per namespace and minute — the four metrics over the trailing 24 h
    up to now, as ``/metrics?since=<now − 24 h>`` computes them — and the alerts it opens or
    resolves, those of the retrieval metrics (``/retrieval-quality`` over the same window)
    included.

    The window ends at the call's own time, not at its minute: a session posted a few seconds
    before the snapshot counts. The snapshot row is keyed by the minute, so a redelivered or
    doubled beat message stores one row (get_or_create on the unique (namespace, ts,
    window_hours)); alerts are evaluated on every call, under the namespace's lock
    (``alerts.alerts_apply``), which writes each crossing once however often it is asked.
    """
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    since = now - timedelta(hours=SNAPSHOT_WINDOW_HOURS)
    namespaces = Namespace.objects.order_by("pk")
    if namespace is not None:
        namespaces = namespaces.filter(name=namespace)
    created = raised = resolved = 0
    for ns in namespaces.iterator():
        evaluated = selectors.namespace_metrics(ns, since, now)
        _, new = MetricSnapshot.objects.get_or_create(
            namespace=ns,
            ts=minute,
            window_hours=SNAPSHOT_WINDOW_HOURS,
            defaults={"metrics": evaluated["metrics"], "warnings": evaluated["warnings"]},
        )
        created += new
        # Retrieval quality alerts on the same window (docs/METRICS.md); it is not stored in
        # the snapshot: its trends are read per day from the injections themselves.
        retrieval = selectors.namespace_retrieval_quality(ns, since, now)
        counts = alerts.alerts_apply(
            namespace_id=ns.pk,
            evaluated={**evaluated["metrics"], **retrieval["alerts"]},
            window=evaluated["window"],
            at=now,
        )
        raised += counts.raised
        resolved += counts.resolved
    return {"snapshots": created, "alerts_raised": raised, "alerts_resolved": resolved}
