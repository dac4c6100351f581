"""Dashboard selectors and chart builders: the grouped metrics equal the API's, bins and
series are right, and the chart module stays pure."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dashboard import charts, selectors
from feedback.selectors import injection_sums, metric_inputs
from rms import policy
from rms.models import MemoryObject, Namespace
from tests.dashboard.conftest import T0, build_history, login
from tests.factories import make_client


@pytest.mark.django_db
@pytest.mark.parametrize("since", [None, T0 + timedelta(hours=1, minutes=30)])
def test_grouped_metric_inputs_equal_the_per_namespace_selector(namespaces, since):
    writer = make_client("w", "client", ["support", "billing"])[0]
    build_history(writer, objects=4, sessions=3)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    grouped = selectors.metric_inputs_by_namespace(ids, since)
    for ns in Namespace.objects.all():
        expected = metric_inputs(ns, since)
        # Σ usage ratio is summed per bin, then over the bins: equal up to rounding.
        assert grouped[ns.pk].usage_ratio_sum == pytest.approx(expected.usage_ratio_sum)
        assert replace(grouped[ns.pk], usage_ratio_sum=0) == replace(expected, usage_ratio_sum=0)


@pytest.mark.django_db
def test_all_time_injection_sums_from_the_aggregates_equal_a_scan_of_the_injections(namespaces):
    writer = make_client("w", "client", ["support", "billing"])[0]
    build_history(writer, objects=4, sessions=3)
    ids = list(Namespace.objects.values_list("pk", flat=True))
    from_aggregates = injection_sums(ids)
    scanned = injection_sums(ids, since=datetime(2000, 1, 1, tzinfo=UTC))
    assert set(from_aggregates) == set(scanned)
    for ns_id, row in scanned.items():
        assert {k: from_aggregates[ns_id][k] for k in ("n", "unused", "wasted")} == {
            k: row[k] for k in ("n", "unused", "wasted")
        }
    assert any(row["unused"] for row in scanned.values())
    assert any(row["wasted"] for row in scanned.values())


@pytest.mark.django_db
def test_histograms_bin_every_active_object_once(history):
    ns = history.objects[0].namespace
    hist = selectors.histograms(list(Namespace.objects.all()), ns)
    assert sum(hist["usage"]) == 3
    assert hist["usage"][9] == 1  # the object confirmed in every session: usage ratio 1.0
    confidences = list(
        MemoryObject.objects.filter(namespace=ns).values_list("confidence", flat=True)
    )
    assert sum(sum(v) for v in hist["confidence"].values()) == len(confidences)
    for c in confidences:
        assert hist["confidence"]["ASSERTED"][min(19, int(c * 20))] >= 1


@pytest.mark.django_db
def test_histograms_put_a_pinned_confidence_of_one_in_the_last_bin(history):
    from rms import services
    from rms.models import ApiClient

    obj = MemoryObject.objects.create(
        namespace=history.objects[0].namespace,
        content="x",
        epistemic_type="OBSERVED",
        decay_profile="SLOW",
        confidence=0.9,
        created_by="t",
        created_by_type="SYSTEM_PROCESS",
        created_at=T0,
        last_op_ts=T0,
    )
    services.object_pin(
        client=ApiClient(name="a", role="admin"), object_id=obj.pk, reason="r", confidence=1.0
    )
    hist = selectors.histograms([obj.namespace], obj.namespace)
    assert hist["confidence"]["OBSERVED"][19] == 1


def test_alert_since_is_the_start_of_the_last_run_of_alert_buckets():
    t = [datetime(2026, 1, 1, h, tzinfo=UTC) for h in range(6)]
    series = selectors.SnapshotSeries(
        buckets=t,
        values={"m": [0.1] * 6},
        alert={"m": [True, False, False, True, True, True]},
    )
    assert series.alert_since("m") == (t[3], False)
    series.alert["m"] = [True] * 6
    assert series.alert_since("m") == (t[0], True)  # began before the history loaded
    series.alert["m"] = [True, True, True, True, True, False]
    assert series.alert_since("m") == (None, False)
    assert series.since(t[4]).buckets == t[4:]


@pytest.mark.django_db
def test_trajectory_carries_state_over_fact_operations(history):
    obj = history.objects[0]
    obj.refresh_from_db()
    points = selectors.trajectory(obj)
    assert [p.op_type for p in points][0] == "OBJECT_CREATED"
    assert len(points) == obj.version
    last_change = [p for p in points if p.op_type == "REINFORCE"][-1]
    assert points[-1].confidence == last_change.confidence == pytest.approx(obj.confidence)


# --- charts (pure) ---------------------------------------------------------------------------


def test_chart_module_imports_without_django():
    code = "import sys, dashboard.charts; assert 'django' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_figures_are_plain_json():
    figs = [
        charts.usage_histogram([1, 2, 3, 0, 0, 0, 0, 0, 0, 4]),
        charts.confidence_histogram({"ASSERTED": [1] * 20}),
        charts.metric_trends(
            [datetime(2026, 1, 1, tzinfo=UTC)],
            {"mean_usage_ratio": [0.3]},
            {"mean_usage_ratio": [False]},
            {"mean_usage_ratio": 0.2},
        ),
        charts.calibration(
            [
                {
                    "extraction_context": "INFERRED",
                    "prior_mean": 0.6,
                    "edges": 2,
                    "observations": 4,
                    "corroborations": 3,
                    "observed": 0.75,
                    "difference": 0.15,
                }
            ]
        ),
        charts.detection_sweep([{"threshold": 0.4, "precision": 1, "recall": 0.5, "f1": 0.6}], 0.4),
    ]
    for fig in figs:
        assert set(fig) == {"data", "layout"}
        json.dumps(fig, allow_nan=False)


def test_sparkline_scales_values_and_threshold_into_the_box():
    spark = charts.sparkline_path([0.1, None, 0.3, 0.2], threshold=0.5, width=100, height=20)
    assert spark["d"].startswith("M")
    assert "M" in spark["d"][1:]  # the gap starts a new segment
    assert spark["threshold_y"] == pytest.approx(3.0)  # the highest value sits at the top pad
    assert (spark["first"], spark["last"]) == (0.1, 0.2)
    assert charts.sparkline_path([None, None]) is None


def test_wilson_interval_is_honest_about_small_counts():
    lo, hi = charts.wilson_interval(1, 1)
    assert lo < 0.25 and hi == pytest.approx(1.0)
    lo, hi = charts.wilson_interval(60, 100)
    assert lo == pytest.approx(0.502, abs=1e-3) and hi == pytest.approx(0.691, abs=1e-3)
    assert charts.wilson_interval(0, 0) is None


def test_trajectory_samples_the_decay_between_operations():
    created = datetime(2026, 1, 1, tzinfo=UTC)
    state = policy.initial_state(epistemic_type="INFERRED")
    point = selectors.TrajectoryPoint(
        seq=1,
        ts=created,
        op_type="OBJECT_CREATED",
        signal_type=None,
        confidence=state.confidence,
        salience_effective=policy.salience_effective(state, created, created),
        state=state,
    )
    fig = charts.trajectory([point], created, created + timedelta(days=10))
    salience = fig["data"][1]["y"]
    assert len(salience) == 1 + charts.DECAY_SAMPLES
    assert salience == sorted(salience, reverse=True)  # FAST decay, no reinforcement
    assert fig["data"][0]["y"] == [state.confidence, state.confidence]


@pytest.mark.django_db
def test_grouped_calibration_equals_the_domain_calibration(history):
    from rms import edges

    writer = history.writer
    objs = history.objects
    rel = edges.relationship_create(
        client=writer,
        source=objs[1].pk,
        target=objs[2].pk,
        relation="related_to",
        extraction_context="SPECULATIVE",
    )
    for kind, provenance in [
        ("corroborate", "user"),
        ("contradict", "external"),
        ("corroborate", "self"),
        ("contradict", None),
    ]:
        edges.relationship_evidence(
            client=writer, relationship_id=rel.pk, kind=kind, provenance=provenance
        )
    edges.relationship_create(
        client=writer,
        source=objs[2].pk,
        target=objs[0].pk,
        relation="implies",
        extraction_context="SPECULATIVE",
    )
    ns = objs[0].namespace
    rows = selectors.calibration(ns)
    assert rows == edges.calibration(ns)
    speculative = next(r for r in rows if r["extraction_context"] == "SPECULATIVE")
    assert (speculative["edges"], speculative["observations"]) == (2, 2)


@pytest.mark.django_db
def test_warm_overview_runs_only_while_the_overview_is_watched(
    history, operator, django_assert_num_queries
):
    from django.core.cache import cache

    from dashboard.tasks import warm_overview
    from tests.dashboard.conftest import login

    cache.delete(selectors.VIEWED_KEY)
    assert warm_overview() == 0  # nobody is watching: no database time
    login(operator).get("/")
    cache.clear()
    cache.set(selectors.VIEWED_KEY, True)
    assert warm_overview() == len(selectors.WINDOWS)
    namespaces = list(Namespace.objects.order_by("name"))
    with django_assert_num_queries(0):
        for window in selectors.WINDOWS:
            selectors.namespace_health(namespaces, window)
        for ns in namespaces:
            selectors.histograms(namespaces, ns)
    # The overview's retrieval card is warmed too, and the warm copy is what a request reads.
    from django.utils import timezone

    from dashboard.selectors import retrieval

    with django_assert_num_queries(0):
        for ns in namespaces:
            trend = retrieval.retrieval_trend(ns, retrieval.OVERVIEW_DAYS, timezone.now())
            assert trend.days[-1] == timezone.now().date()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_first_render_computes_object_statistics_on_a_second_connection(
    require_postgres, namespaces
):
    from unittest import mock

    from django.core.cache import cache

    from dashboard.selectors import overview as selectors

    writer = make_client("w", "client", ["support", "billing"])[0]
    build_history(writer, objects=4, sessions=3)
    nss = list(Namespace.objects.order_by("name"))
    try:
        cache.clear()
        assert selectors._overlap_possible()
        with mock.patch.object(selectors, "_both_computed", wraps=selectors._both_computed) as both:
            overlapped, _ = selectors.namespace_health(nss, "all")
        assert both.call_count == 1
        cache.clear()
        with mock.patch.object(selectors, "_overlap_possible", return_value=False):
            sequential, _ = selectors.namespace_health(nss, "all")
    finally:
        selectors.close_side_connection()
        cache.clear()

    def view(health):
        return [(h.namespace.pk, h.evaluated, h.objects, h.review_queue) for h in health]

    assert view(overlapped) == view(sequential)
    assert sum(h.objects for h in overlapped) == MemoryObject.objects.count() > 0


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_overview_reads_its_retrieval_card_on_its_own_connection(require_postgres, admin):
    """A first render with the namespace named starts the retrieval card on the card
    connection while the health is read; the page shows what the sequential render shows."""
    import threading
    from unittest import mock

    import time_machine
    from django.core.cache import cache

    from dashboard.selectors import overview as selectors
    from dashboard.selectors import retrieval

    build_history(make_client("w", "client", ["support"])[0], objects=4, sessions=3)
    threads = []
    real = retrieval.retrieval_trend

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    try:
        with time_machine.travel(T0 + timedelta(days=2), tick=False):
            cache.clear()
            with mock.patch.object(retrieval, "retrieval_trend", recorded):
                overlapped = login(admin).get("/?namespace=support").context["retrieval"]
            cache.clear()
            with mock.patch.object(selectors, "_overlap_possible", return_value=False):
                sequential = login(admin).get("/?namespace=support").context["retrieval"]
    finally:
        selectors.close_side_connection()
        cache.clear()
    assert threads and threads[0].startswith("overview-card")
    assert overlapped.window == sequential.window and overlapped.window["sessions"] == 3
    assert overlapped.by_day == sequential.by_day


@pytest.mark.django_db
def test_inside_a_transaction_the_overview_stays_on_one_connection(namespaces):
    from django.db import transaction

    from dashboard.selectors import overview as selectors

    with transaction.atomic():
        assert not selectors._overlap_possible()


# --- the object and session pages' reads ----------------------------------------------------------


@pytest.mark.django_db
def test_object_as_of_is_the_state_after_the_last_operation_at_that_time(history):
    obj = history.objects[0]
    assert selectors.object_as_of(obj, T0 - timedelta(days=2)) is None  # before it existed
    created = selectors.object_as_of(obj, T0)  # created a day before T0, no session yet
    assert (created.op.op_type, created.version, created.state.confidence) == (
        "OBJECT_CREATED",
        1,
        0.75,
    )
    after_first = selectors.object_as_of(obj, T0 + timedelta(hours=1))
    assert after_first.op.op_type == "REINFORCE"
    assert after_first.state.confidence == 0.75 + 0.15 * (1 - 0.75)  # one CONFIRMED


@pytest.mark.django_db
def test_relationships_of_names_the_other_end(history):
    a, b = history.objects[0], history.objects[1]
    (from_a,) = selectors.relationships_of(a, T0)
    (from_b,) = selectors.relationships_of(b, T0)
    assert (from_a["outgoing"], from_a["other"].pk) == (True, b.pk)
    assert (from_b["outgoing"], from_b["other"].pk) == (False, a.pk)


@pytest.mark.django_db
def test_session_detail_lists_rows_in_order_and_attaches_the_changes_objects(
    history, django_assert_num_queries
):
    from feedback.models import FeedbackSession

    first = FeedbackSession.objects.get(request_id="r-0")
    with django_assert_num_queries(3):
        detail = selectors.session_detail(first)
    assert [i.object_id for i in detail.injections] == [o.pk for o in history.objects]
    assert [(s.signal_type, s.object_id) for s in detail.signals] == [
        ("CONFIRMED", history.objects[0].pk),
        ("CORRECTED", history.objects[1].pk),
    ]
    assert [(c.op_type, c.object.pk) for c in detail.changes] == [
        ("REINFORCE", history.objects[0].pk),
        ("PENALTY", history.objects[1].pk),
    ]
