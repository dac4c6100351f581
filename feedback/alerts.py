"""Alerts as operations (API.md "The closed loop"): each metric snapshot opens an alert for a
metric that entered ``alert`` and resolves the open one of a metric back to ``ok``.

The rule itself is ``metrics.alert_changes`` (pure); this service applies it under the
namespace's row lock, so two snapshots of the same namespace (a doubled beat message, a task run
beside beat) serialise and each crossing is written exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from feedback import metrics
from feedback.models import Alert
from rms import oplog, store
from rms.models import Namespace, Operation
from rms.replay import iso

ACTOR_ID = "metric-snapshot"
ACTOR_TYPE = "SYSTEM_PROCESS"


@dataclass(frozen=True)
class AlertCounts:
    raised: int = 0
    resolved: int = 0


def alerts_apply(*, namespace_id: int, evaluated: dict, window: dict, at: datetime) -> AlertCounts:
    """Open and resolve the namespace's alerts for one snapshot's ``evaluated`` metrics.

    One transaction: the namespace row is locked, the open alerts read, and every change is an
    Alert row plus its ALERT_RAISED / ALERT_RESOLVED operation on the namespace's chain. The
    operation's ``ts`` is the snapshot time (never before the chain's last operation). Safe to
    rerun: a crossing already applied finds its alert open (or resolved) and writes nothing.
    """
    with transaction.atomic():
        ns = Namespace.objects.select_for_update().get(pk=namespace_id)
        open_alerts = {a.metric: a for a in Alert.objects.filter(namespace=ns, state=Alert.OPEN)}
        changes = metrics.alert_changes(evaluated, set(open_alerts))
        if not changes:
            return AlertCounts()
        ts = max(at, ns.last_op_ts) if ns.last_op_ts else at
        raised = resolved = 0
        for change in changes:
            if change.raise_:
                alert = Alert.objects.create(
                    namespace=ns,
                    metric=change.metric,
                    raised_at=ts,
                    value=change.value,
                    threshold=change.threshold,
                    window=window,
                )
                op_type = "ALERT_RAISED"
                raised += 1
            else:
                alert = open_alerts[change.metric]
                alert.state = Alert.RESOLVED
                alert.resolved_at = ts
                alert.resolved_value = change.value
                alert.save(update_fields=["state", "resolved_at", "resolved_value"])
                op_type = "ALERT_RESOLVED"
                resolved += 1
            payload = {
                "alert_id": str(alert.pk),
                "metric": change.metric,
                "value": change.value,
                "threshold": change.threshold,
                "window": window,
            }
            op = oplog.namespace_op(
                ns, op_type, ts=ts, payload=payload, actor_id=ACTOR_ID, actor_type=ACTOR_TYPE
            )
            store.get().insert(Operation, [op])
        ns.save(update_fields=["head_hash", "last_op_ts"])
    return AlertCounts(raised, resolved)


def alert_out(alert: Alert, now: datetime | None = None) -> dict:
    """An alert as the API shows it (API.md ``/alerts``): its duration once resolved, and how
    long it has lasted at ``now`` (so far, while open)."""
    end = alert.resolved_at
    elapsed_end = end or now or timezone.now()
    return {
        "id": str(alert.pk),
        "namespace": alert.namespace.name,
        "metric": alert.metric,
        "state": alert.state,
        "raised_at": iso(alert.raised_at),
        "resolved_at": iso(end),
        "value": alert.value,
        "threshold": alert.threshold,
        "window": alert.window,
        "duration_seconds": (end - alert.raised_at).total_seconds() if end else None,
        "elapsed_seconds": max(0.0, (elapsed_end - alert.raised_at).total_seconds()),
        "resolved_value": alert.resolved_value,
    }
