"""Alerts as operations (API.md "The closed loop"): opened and resolved exactly once per
crossing by metric snapshots, on the namespace's own chain, listed by ``/alerts``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from feedback import metrics, snapshots
from feedback.models import Alert, MetricSnapshot
from rms import verification
from rms.models import Namespace, Operation
from taskruns import kinds, tasks

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_alert_changes_open_on_alert_resolve_on_ok_and_ignore_no_data():
    evaluated = {
        metrics.MEAN_USAGE_RATIO: {"state": "alert", "value": 0.1, "threshold": 0.2},
        metrics.HIGH_CORRECTION_RATE: {"state": "ok", "value": 0.05, "threshold": 0.1},
        metrics.BUDGET_WASTE_RATIO: {"state": "no_data", "value": None, "threshold": 0.3},
        metrics.UNUSED_INJECTION_RATE: {"state": "alert", "value": 0.9, "threshold": 0.6},
    }
    changes = metrics.alert_changes(
        evaluated, {metrics.HIGH_CORRECTION_RATE, metrics.BUDGET_WASTE_RATIO,
                    metrics.UNUSED_INJECTION_RATE}
    )  # fmt: skip
    assert changes == [
        metrics.AlertChange(metrics.MEAN_USAGE_RATIO, True, 0.1, 0.2),
        metrics.AlertChange(metrics.HIGH_CORRECTION_RATE, False, 0.05, 0.1),
    ]
    # no_data neither opens nor resolves; an alert already open is not opened again.
    assert metrics.alert_changes(evaluated, set(metrics.METRIC_NAMES) - {"x"})[1:] == []


def _session(api, n, oid, signal):
    body = {
        "session_id": f"s-{n}", "request_id": f"r-{n}", "namespace_scope": ["support"],
        "context_budget": 1000, "tokens_used": 10,
        "injections": [{"object_id": oid, "token_cost": 10, "rank_position": 1}],
        "signals": [{"object_id": oid, "signal_type": signal}],
    }  # fmt: skip
    r = api.post("/api/v1/feedback-sessions", body, format="json")
    assert r.status_code == 201, r.content


@pytest.mark.django_db
def test_snapshots_raise_and_resolve_each_crossing_once(client_api, operator_api):
    with time_machine.travel(T0 - timedelta(minutes=5), tick=False):
        oid = client_api.post(
            "/api/v1/objects",
            {"namespace": "support", "content": "Alice prefers Python",
             "epistemic_type": "ASSERTED"},
            format="json",
        ).json()["id"]  # fmt: skip
        _session(client_api, 0, oid, "CORRECTED")
    with time_machine.travel(T0, tick=False):
        # One session, corrected: corrections 1/1 > 0.10, usage 0/1 < 0.20 (SPEC §10); its one
        # injection (rank 1) unused: hit rate 0 < 0.50, precision@1 0 < 0.30 (docs/METRICS.md).
        assert snapshots.take_snapshots() == {
            "snapshots": 1,
            "alerts_raised": 4,
            "alerts_resolved": 0,
        }
        # The same minute again: the snapshot exists, nothing is evaluated twice.
        assert snapshots.take_snapshots() == {
            "snapshots": 0,
            "alerts_raised": 0,
            "alerts_resolved": 0,
        }
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        # Still in alert at the next snapshot: no second alert.
        assert snapshots.take_snapshots()["alerts_raised"] == 0
        for n in range(1, 10):
            _session(client_api, n, oid, "CONFIRMED")
    with time_machine.travel(T0 + timedelta(minutes=2), tick=False):
        # 1 correction in 10 sessions is not > 0.10; usage 9/10; hit rate and precision@1 9/10:
        # all four resolve.
        assert snapshots.take_snapshots() == {
            "snapshots": 1,
            "alerts_raised": 0,
            "alerts_resolved": 4,
        }
    with time_machine.travel(T0 + timedelta(minutes=3), tick=False):
        assert snapshots.take_snapshots()["alerts_resolved"] == 0

    ns = Namespace.objects.get(name="support")
    alerts = {a.metric: a for a in Alert.objects.all()}
    assert set(alerts) == {
        metrics.HIGH_CORRECTION_RATE,
        metrics.MEAN_USAGE_RATIO,
        metrics.RETRIEVAL_HIT_RATE,
        metrics.RETRIEVAL_PRECISION_AT_1,
    }
    hit = alerts[metrics.RETRIEVAL_HIT_RATE]
    assert (hit.state, hit.value, hit.threshold) == ("resolved", 0.0, 0.50)
    assert hit.resolved_value == pytest.approx(0.9)
    corr = alerts[metrics.HIGH_CORRECTION_RATE]
    assert (corr.state, corr.value, corr.threshold) == ("resolved", 1.0, 0.10)
    assert (corr.raised_at, corr.resolved_at) == (T0, T0 + timedelta(minutes=2))
    assert corr.resolved_value == pytest.approx(0.1)
    assert corr.window == {
        "since": "2026-05-31T12:00:00.000000+00:00",
        "until": "2026-06-01T12:00:00.000000+00:00",
    }

    ops = list(Operation.objects.filter(target_id=ns.uid).order_by("seq"))
    assert [op.op_type for op in ops] == ["ALERT_RAISED"] * 4 + ["ALERT_RESOLVED"] * 4
    assert {op.target_type for op in ops} == {"namespace"}
    assert ops[0].payload["alert_id"] == str(alerts[ops[0].payload["metric"]].pk)
    ns.refresh_from_db()
    assert ns.head_hash == ops[-1].hash
    assert verification.verify_chain_all()["ok"] is True

    # The API lists them newest first (raised at the same minute: by id, descending).
    body = operator_api.get("/api/v1/alerts", {"namespace": "support"}).json()
    assert [a["metric"] for a in body["results"]] == sorted(
        alerts, key=lambda m: str(alerts[m].pk), reverse=True
    )
    item = next(a for a in body["results"] if a["metric"] == metrics.HIGH_CORRECTION_RATE)
    assert item["state"] == "resolved"
    assert item["value"] == 1.0
    assert item["threshold"] == 0.10
    assert item["duration_seconds"] == 120.0
    assert item["elapsed_seconds"] == 120.0
    assert item["resolved_value"] == alerts[metrics.HIGH_CORRECTION_RATE].resolved_value
    assert item["resolved_value"] is not None
    only = operator_api.get(
        "/api/v1/alerts", {"namespace": "support", "metric": metrics.HIGH_CORRECTION_RATE}
    ).json()["results"]
    assert [a["id"] for a in only] == [item["id"]]
    assert item["raised_at"].startswith("2026-06-01T12:00:00")
    assert operator_api.get("/api/v1/alerts", {"state": "open"}).json()["results"] == []
    assert len(client_api.get("/api/v1/alerts").json()["results"]) == 4


@pytest.mark.django_db
def test_a_tampered_alert_operation_breaks_the_namespace_chain(client_api):
    with time_machine.travel(T0 - timedelta(minutes=5), tick=False):
        oid = client_api.post(
            "/api/v1/objects",
            {"namespace": "support", "content": "x", "epistemic_type": "ASSERTED"},
            format="json",
        ).json()["id"]
        _session(client_api, 0, oid, "CORRECTED")
    with time_machine.travel(T0, tick=False):
        snapshots.take_snapshots()
    op = Operation.objects.filter(op_type="ALERT_RAISED").first()
    Operation.objects.filter(seq=op.seq).update(payload={**op.payload, "value": 0.5})
    result = verification.verify_chain_all()
    assert result["ok"] is False
    assert [m["target_type"] for m in result["mismatches"]] == ["namespace"]


@pytest.mark.django_db
def test_no_data_opens_nothing(namespace):
    with time_machine.travel(T0, tick=False):
        assert snapshots.take_snapshots() == {
            "snapshots": 1,
            "alerts_raised": 0,
            "alerts_resolved": 0,
        }
    assert MetricSnapshot.objects.count() == 1
    assert not Alert.objects.exists()
    assert not Operation.objects.filter(target_type="namespace").exists()


@pytest.mark.django_db
def test_alerts_access_and_bad_input(client_api, outsider_api, operator_api, anon_api):
    assert anon_api.get("/api/v1/alerts").status_code == 401
    r = outsider_api.get("/api/v1/alerts", {"namespace": "support"})
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert operator_api.get("/api/v1/alerts", {"namespace": "nope"}).status_code == 404
    r = operator_api.get("/api/v1/alerts", {"state": "closed"})
    assert r.status_code == 400
    assert "state" in r.json()["error"]["fields"]
    assert operator_api.get("/api/v1/alerts", {"cursor": "bad"}).status_code == 400
    assert client_api.get("/api/v1/alerts").json() == {"results": [], "next": None}


@pytest.mark.django_db
def test_metric_snapshot_task_kind_is_for_operators(operator_api, client_api, namespace):
    r = client_api.post("/api/v1/tasks", {"kind": "metric_snapshot"}, format="json")
    assert r.status_code == 403
    r = operator_api.post(
        "/api/v1/tasks", {"kind": "metric_snapshot", "params": {"namespace": "nope"}}, format="json"
    )
    assert r.status_code == 400
    r = operator_api.post("/api/v1/tasks", {"kind": "metric_snapshot"}, format="json")
    assert r.status_code == 202, r.content


@pytest.mark.django_db
def test_metric_snapshot_runner_returns_counts(namespace):
    with time_machine.travel(T0, tick=False):
        assert kinds.KINDS["metric_snapshot"].run({"namespace": "support"}, lambda f: None) == {
            "snapshots": 1,
            "alerts_raised": 0,
            "alerts_resolved": 0,
        }


@pytest.mark.django_db
def test_a_snapshot_counts_the_sessions_posted_in_its_own_minute(client_api, operator_api):
    """Three sessions each injecting one object that goes unused, then the operator's
    metric_snapshot task a few seconds later, in the same minute: unused injections 3/3 > 0.60
    and usage 0/1 < 0.20 both open an alert (SPEC §10; API.md "Alerts": the snapshot evaluates
    the metrics as ``/metrics?since=<now − 24 h>`` does, and that window ends now), and so do
    the retrieval hit rate and precision@1, both 0 (docs/METRICS.md)."""
    with time_machine.travel(T0 + timedelta(seconds=10), tick=False):
        oid = client_api.post(
            "/api/v1/objects",
            {"namespace": "support", "content": "Bob is on call", "epistemic_type": "ASSERTED"},
            format="json",
        ).json()["id"]
        for n in range(3):
            body = {
                "session_id": f"u-{n}", "request_id": f"u-{n}", "namespace_scope": ["support"],
                "context_budget": 1000, "tokens_used": 10,
                "injections": [{"object_id": oid, "token_cost": 10, "rank_position": 1}],
            }  # fmt: skip
            r = client_api.post("/api/v1/feedback-sessions", body, format="json")
            assert r.status_code == 201, r.content
            assert r.json()["unused_ids"] == [oid]
    with time_machine.travel(T0 + timedelta(seconds=40), tick=False):
        r = operator_api.post(
            "/api/v1/tasks", {"kind": "metric_snapshot", "params": {"namespace": "support"}},
            format="json",
        )  # fmt: skip
        assert r.status_code == 202, r.content
        assert tasks.run_task.run(r.json()["id"]) == "succeeded"
        assert operator_api.get("/api/v1/tasks/" + r.json()["id"]).json()["result"] == {
            "snapshots": 1, "alerts_raised": 4, "alerts_resolved": 0,
        }  # fmt: skip
        live = operator_api.get("/api/v1/metrics", {"namespace": "support"}).json()["metrics"]
    body = operator_api.get("/api/v1/alerts", {"namespace": "support", "state": "open"}).json()
    opened = {a["metric"]: a for a in body["results"]}
    assert set(opened) == {
        metrics.UNUSED_INJECTION_RATE,
        metrics.MEAN_USAGE_RATIO,
        metrics.RETRIEVAL_HIT_RATE,
        metrics.RETRIEVAL_PRECISION_AT_1,
    }
    assert opened[metrics.UNUSED_INJECTION_RATE]["value"] == 1.0
    assert opened[metrics.MEAN_USAGE_RATIO]["value"] == 0.0
    # what the snapshot saw is what /metrics shows for the same sessions
    assert live[metrics.UNUSED_INJECTION_RATE]["value"] == 1.0
