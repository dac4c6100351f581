"""The aggregate part of the rollup (``feedback.window_rollup``, ``feedback.aggregate_sums``):
the usage histogram (Σ usage ratio, count, review queue per bin) and the all-time injection sums
read from it equal the live forms (``usage_part``, ``lifetime_injection_part``) at every moment
— over random histories, with an object crossing a usage bin after the run, becoming
DEPRECATED after it, new objects and first injections, a retention delete of rows beyond the
mark, a rebuild, no run yet and a first run under way — and a rerun changes nothing."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection, transaction

from dashboard.selectors import overview
from feedback import aggregate_sums, object_rollup, rebuild, retention, window_rollup
from feedback.aggregate_sums import BinSums, Member
from feedback.models import (
    AggregateBin,
    AggregateMember,
    FeedbackAggregate,
    FeedbackSession,
    ObjectBin,
    ObjectMember,
    WindowRollupMark,
)
from feedback.object_rollup import lifetime_injection_part
from rms import events, explain, services, store
from rms.models import Namespace, Operation
from rms.replay import iso
from tests.dashboard.conftest import T0, record, session_body
from tests.factories import make_client, make_namespace, make_object, run_without_django

NOW = T0 + timedelta(days=4)


def usage_view(sums: aggregate_sums.Sums) -> dict:
    """{(namespace, bin): (Σ usage ratio, count, queue)} of the non-empty usage bins."""
    return {
        (ns, b): (v.usage_sum, v.objects, v.queue)
        for ns, bins in sums.items()
        for b, v in bins.items()
        if b != aggregate_sums.UNCOUNTED and (v.objects or v.queue)
    }


def lifetime_view(sums: aggregate_sums.Sums) -> dict:
    out = {}
    for ns, bins in sums.items():
        t = aggregate_sums.lifetime(bins)
        if t != BinSums():
            out[ns] = (t.injections, t.unused, t.wasted)
    return out


def assert_equal_live(ids) -> dict:
    """The rolled read against the live forms (the float sums within rounding: they are added
    in another order), through the read itself, the all-time window sums and the overview's
    object statistics. Returns the live usage view."""
    live = object_rollup.aggregate_sums_live(ids)
    got = object_rollup.aggregate_sums_by_namespace(ids)
    expected_usage, got_usage = usage_view(live), usage_view(got)
    assert set(got_usage) == set(expected_usage)
    for key, (total, n, queue) in expected_usage.items():
        assert got_usage[key][1:] == (n, queue), key
        assert got_usage[key][0] == pytest.approx(total, rel=1e-12, abs=1e-12), key
    # The live injection sums straight from their query, not through aggregate_sums_live.
    expected_lifetime = {
        ns: (i or 0, u or 0, w or 0)
        for ns, _, _, _, i, u, w in lifetime_injection_part(ids)
        if (i or u or w)
    }
    assert lifetime_view(got) == expected_lifetime
    assert lifetime_view(live) == expected_lifetime
    window = window_rollup.window_sums_by_namespace(ids, None, None, lifetime=True)
    assert {
        ns: (s.injections, s.unused, s.wasted) for ns, s in window.items() if s.injections
    } == expected_lifetime
    rolled_stats, live_stats = overview.object_stats(ids), overview.object_stats(ids, live=True)
    for ns in ids:
        a, b = rolled_stats[ns], live_stats[ns]
        assert (a.usage_ratio_count, a.review_queue, a.usage, a.objects, a.confidence) == (
            b.usage_ratio_count,
            b.review_queue,
            b.usage,
            b.objects,
            b.confidence,
        )
        assert a.usage_ratio_sum == pytest.approx(b.usage_ratio_sum, rel=1e-12, abs=1e-12)
    return expected_usage


def stored():
    members = sorted(
        AggregateMember.objects.values_list(
            "object_id", "namespace_id", "usage_ratio", "total_injections", "unused_sessions",
            "total_token_cost", "deprecated",
        )
    )  # fmt: skip
    bins = sorted(
        AggregateBin.objects.values_list(
            "namespace_id", "bin", "usage_sum", "counted", "queue", "injections", "unused",
            "wasted",
        )
    )  # fmt: skip
    return members, bins


@pytest.fixture
def ns(db):
    return make_namespace("support"), make_namespace("billing")


@pytest.fixture
def admin(ns):
    return make_client("adm", "admin")[0]


def random_sessions(writer, objs, n, rng, start, prefix):
    bodies = []
    for k in range(n):
        picked = rng.sample(objs, rng.randint(1, min(4, len(objs))))
        signals = [
            (o.pk, rng.choice(["REFERENCED", "CONFIRMED", "CORRECTED", "UNUSED"]), "explicit_user")
            for o in picked
            if rng.random() < 0.35
        ]
        body = session_body(f"{prefix}-{k}", [(o.pk, rng.randint(5, 90)) for o in picked], signals)
        body["namespace_scope"] = sorted({o.namespace.name for o in objs})
        body["ts"] = (start + timedelta(minutes=17 * k)).isoformat()
        bodies.append(body)
    record(writer, *bodies)


def objects(writer, n, namespace="support", prefix="fact"):
    return [
        make_object(writer, namespace=namespace, content=f"{prefix} {i}", ts=T0 - timedelta(days=1))
        for i in range(n)
    ]


# --- pure -----------------------------------------------------------------------------------------


def test_an_objects_contribution_follows_spec_10():
    # Active, used 1 in 25 injections: bin 0, in the review queue (< 0.10, ≥ 20), wasteful
    # (< 0.05): its cost counts as wasted.
    assert aggregate_sums.contribution(Member(1, 0.04, 25, 20, 900, False)) == (
        0,
        BinSums(usage_sum=0.04, objects=1, queue=1, injections=25, unused=20, wasted=900),
    )
    # 1.0 is in the last bin; a DEPRECATED or never-injected object only in the injection sums.
    assert aggregate_sums.contribution(Member(1, 1.0, 3, 0, 60, False))[0] == 9
    assert aggregate_sums.contribution(Member(1, 0.5, 4, 1, 80, True)) == (
        aggregate_sums.UNCOUNTED,
        BinSums(injections=4, unused=1),
    )
    assert aggregate_sums.contribution(Member(1, None, 0, 0, 0, False)) == (
        aggregate_sums.UNCOUNTED,
        BinSums(),
    )
    # The read: the stored sums minus the object as counted plus it as it is.
    was, now = Member(1, 0.5, 2, 1, 40, False), Member(1, 0.25, 4, 3, 70, False)
    got = aggregate_sums.corrected(aggregate_sums.total([was]), [was], [now])
    assert got[1][5] == BinSums()
    assert got[1][2] == BinSums(0.25, 1, 0, 4, 3, 0)


def test_the_pure_module_imports_without_django():
    run_without_django(
        "import sys, feedback.aggregate_sums; "
        "assert 'django' not in sys.modules, sorted(sys.modules)"
    )


# --- against the live forms -----------------------------------------------------------------------


def test_random_histories_read_from_the_rollup_equal_the_live_forms(ns, admin):
    rng = random.Random(20261206)
    writer = make_client("w", "client", ["support", "billing"])[0]
    objs = objects(writer, 8) + objects(writer, 4, "billing", "bill")
    random_sessions(writer, objs, 40, rng, T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    assert WindowRollupMark.objects.get().aggregates
    assert AggregateMember.objects.count() == FeedbackAggregate.objects.count() == 12
    before = assert_equal_live(ids)
    # After the run: more sessions (bins crossed, objects injected for the first time), a new
    # object, a DEPRECATED one; every read equals the live form before the next run.
    late = objects(writer, 3, prefix="late")
    random_sessions(writer, objs[:6] + late[:2], 30, rng, T0 + timedelta(days=1), "b")
    services.object_transition(
        client=admin, object_id=objs[1].pk, to="DEPRECATED", reason="wrong", ts=NOW
    )
    after = assert_equal_live(ids)
    assert after != before
    # The next run counts it all; a rerun writes the same rows.
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert assert_equal_live(ids) == after
    rows = stored()
    assert AggregateMember.objects.filter(deprecated=True).count() == 1
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert stored() == rows
    assert_equal_live(ids)


def test_an_object_crossing_a_bin_after_the_run_moves_at_once(ns):
    writer = make_client("w", "client", ["support"])[0]
    obj, other = objects(writer, 2)
    # obj: 2 injections, 1 confirmed (0.5, bin 5); other: 1 injection, used (1.0, bin 9).
    record(
        writer,
        session_body(
            "s0",
            [(obj.pk, 40), (other.pk, 10)],
            [(obj.pk, "CONFIRMED", "explicit_user"), (other.pk, "REFERENCED", "explicit_user")],
        ),
        session_body("s1", [(obj.pk, 30)], hours=2),
    )
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    assert assert_equal_live([support]) == {
        (support, 5): (0.5, 1, 0),
        (support, 9): (1.0, 1, 0),
    }
    # Two more unused injections: 1/4 = 0.25, bin 2; nothing rolled since.
    record(writer, session_body("s2", [(obj.pk, 20)], hours=3))
    record(writer, session_body("s3", [(obj.pk, 20)], hours=4))
    assert assert_equal_live([support]) == {
        (support, 2): (0.25, 1, 0),
        (support, 9): (1.0, 1, 0),
    }
    stats = overview.object_stats([support])[support]
    assert (stats.usage_ratio_count, stats.usage[2], stats.usage[5]) == (2, 1, 0)
    (i, u, w) = lifetime_view(object_rollup.aggregate_sums_by_namespace([support]))[support]
    assert (i, u, w) == (5, 3, 0)


def test_an_object_deprecated_after_the_run_leaves_the_histogram_at_once(ns, admin):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 3)
    record(
        writer,
        session_body(
            "s0",
            [(o.pk, 10 * (k + 1)) for k, o in enumerate(objs)],
            [(objs[0].pk, "CONFIRMED", "explicit_user")],
        ),
    )
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    assert sum(v[1] for v in assert_equal_live([support]).values()) == 3
    # No injection and no signal: only the comparison of the DEPRECATED ids finds it.
    services.object_transition(
        client=admin, object_id=objs[0].pk, to="DEPRECATED", reason="stale", ts=NOW
    )
    assert assert_equal_live([support]) == {(support, 0): (0.0, 2, 0)}
    # Still in the injection sums (they count every aggregate): 3 injections, 2 ended unused,
    # 20 + 30 tokens of the two wasteful objects.
    assert lifetime_view(object_rollup.aggregate_sums_by_namespace([support])) == {
        support: (3, 2, 50)
    }
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert assert_equal_live([support]) == {(support, 0): (0.0, 2, 0)}


def test_a_retention_delete_of_rows_beyond_the_mark_makes_the_namespace_live(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 4)
    random_sessions(writer, objs, 12, random.Random(5), T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    # A session recorded after the run with an old ts, then deleted by the retention pass
    # before the next run: its object's aggregate keeps the injection, the row that showed it
    # is gone.
    (fresh,) = objects(writer, 1, prefix="fresh")
    body = session_body("old", [(fresh.pk, 55)], hours=0)
    body["ts"] = (T0 + timedelta(minutes=1)).isoformat()
    record(writer, body)
    assert_equal_live(ids)
    old = [
        str(s)
        for s in FeedbackSession.objects.filter(request_id="old").values_list("id", flat=True)
    ]
    with transaction.atomic():  # what the retention pass does to a batch of old sessions
        retention._delete_sessions(old)
    support = Namespace.objects.get(name="support").pk
    assert WindowRollupMark.objects.get().aggregates_live == [support]
    assert_equal_live(ids)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().aggregates_live == []
    assert_equal_live(ids)
    # Deleting rows the run had counted changes no aggregate: the namespace stays rolled.
    early = [
        str(s) for s in FeedbackSession.objects.order_by("ts").values_list("id", flat=True)[:3]
    ]
    with transaction.atomic():
        retention._delete_sessions(early)
    assert WindowRollupMark.objects.get().aggregates_live == []
    assert_equal_live(ids)


def test_a_rebuild_that_changes_an_aggregate_makes_its_namespace_live(ns):
    writer = make_client("w", "client", ["support", "billing"])[0]
    objs = objects(writer, 3) + objects(writer, 2, "billing", "bill")
    random_sessions(writer, objs, 12, random.Random(8), T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    # An aggregate that drifted when the rollup ran …
    victim = FeedbackAggregate.objects.filter(namespace__name="support").first()
    right = (victim.total_injections, victim.unused_sessions, victim.total_token_cost)
    FeedbackAggregate.objects.filter(pk=victim.pk).update(
        total_injections=victim.total_injections + 7, total_token_cost=0, unused_sessions=0
    )
    window_rollup.rollup_all(NOW)
    # … repaired by a rebuild, with no injection or signal to show it.
    rebuild.rebuild_objects([victim.pk])
    victim.refresh_from_db()
    assert (victim.total_injections, victim.unused_sessions, victim.total_token_cost) == right
    support = Namespace.objects.get(name="support").pk
    assert WindowRollupMark.objects.get().aggregates_live == [support]
    assert_equal_live(ids)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().aggregates_live == []
    assert_equal_live(ids)
    # A rebuild that changes nothing leaves the namespace rolled.
    rebuild.rebuild_objects([victim.pk])
    assert WindowRollupMark.objects.get().aggregates_live == []


def test_without_a_run_or_during_the_first_the_read_is_live(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 3)
    random_sessions(writer, objs, 8, random.Random(1), T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    assert not WindowRollupMark.objects.exists()
    assert_equal_live(ids)
    # A first run under way (its mark made, nothing counted yet): still live.
    WindowRollupMark.objects.create(through=window_rollup.NOTHING)
    assert_equal_live(ids)
    window_rollup.rollup_all(NOW)
    assert_equal_live(ids)


def test_after_a_run_the_sums_come_from_the_rollup_not_a_scan(ns):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 3)
    random_sessions(writer, objs, 6, random.Random(2), T0, "a")
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    live = lifetime_view(object_rollup.aggregate_sums_live([support]))[support]
    # A stored sum moved by hand shows in the read: it is the rollup's, corrected only for the
    # objects that may have changed (none here).
    AggregateBin.objects.filter(namespace_id=support, bin=aggregate_sums.UNCOUNTED).delete()
    AggregateBin.objects.create(namespace_id=support, bin=aggregate_sums.UNCOUNTED, injections=1000)
    got = lifetime_view(object_rollup.aggregate_sums_by_namespace([support]))[support]
    assert got[0] == live[0] + 1000


def test_a_namespace_made_live_while_a_run_counts_stays_live_until_the_next(ns, monkeypatch):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 3)
    random_sessions(writer, objs, 6, random.Random(4), T0, "a")
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    count = object_rollup.count_members

    def rebuilt_meanwhile():
        # A rebuild that commits after this run read the mark's live set: the count may or may
        # not hold its change, so the namespace stays live past this run.
        object_rollup.forget_aggregates([support])
        return count()

    monkeypatch.setattr(object_rollup, "count_members", rebuilt_meanwhile)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().aggregates_live == [support]
    assert_equal_live([support])
    monkeypatch.setattr(object_rollup, "count_members", count)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().aggregates_live == []
    assert_equal_live([support])


def test_far_behind_the_writes_the_read_scans_and_still_equals(ns, monkeypatch):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 4)
    random_sessions(writer, objs, 8, random.Random(6), T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    random_sessions(writer, objs, 8, random.Random(7), T0 + timedelta(days=1), "b")
    monkeypatch.setattr(object_rollup, "RECOUNT_MAX", 1)
    assert_equal_live(ids)


# --- the objects part: object count and confidence histogram --------------------------------------


def assert_objects_equal_live(ids) -> dict:
    """The object counts read from the rollup against the live scan (the object count and
    the confidence histogram follow through ``assert_equal_live``). Returns the live counts."""
    live = object_rollup.object_counts_live(ids)
    _, got = object_rollup.object_sums_by_namespace(ids)
    assert {k: n for k, n in got.items() if n} == live
    assert_equal_live(ids)
    return live


def stored_objects():
    members = sorted(
        ObjectMember.objects.values_list("object_id", "namespace_id", "epistemic_type", "bin")
    )
    bins = sorted(ObjectBin.objects.values_list("namespace_id", "epistemic_type", "bin", "counted"))
    return members, bins


def test_a_confidence_bin_is_the_live_sqls():
    assert aggregate_sums.confidence_bin(0.0) == 0
    assert aggregate_sums.confidence_bin(0.049) == 0
    assert aggregate_sums.confidence_bin(0.05) == 1
    assert aggregate_sums.confidence_bin(0.97) == 19
    assert aggregate_sums.confidence_bin(1.0) == 19
    got = aggregate_sums.objects_corrected(
        {(1, "OBSERVED", 3): 2}, [(1, "OBSERVED", 3)], [(1, "DEPRECATED", 3), (1, "OBSERVED", 9)]
    )
    assert got == {(1, "OBSERVED", 3): 1, (1, "DEPRECATED", 3): 1, (1, "OBSERVED", 9): 1}


def test_object_state_operations_are_change_operations_and_the_replays():
    # The objects a read recounts come from the change feed's index: every operation that
    # moves an object's state is a v1 change operation (and exactly what the replay folds).
    assert set(events.OBJECT_STATE_OPS) <= set(events.V1_CHANGE_OPS)
    assert set(events.OBJECT_STATE_OPS) == set(explain.STATE_OP_TYPES)


def test_random_histories_of_confidence_and_type_read_from_the_rollup_equal_the_scan(ns, admin):
    rng = random.Random(20261207)
    writer = make_client("w", "client", ["support", "billing"])[0]
    objs = objects(writer, 10) + objects(writer, 5, "billing", "bill")
    random_sessions(writer, objs, 30, rng, T0, "a")
    ids = list(Namespace.objects.values_list("pk", flat=True))
    window_rollup.rollup_all(NOW)
    assert WindowRollupMark.objects.get().objects_bound is not None
    assert ObjectMember.objects.count() == 15
    before = assert_objects_equal_live(ids)
    # After the run: reinforcements and penalties (bins crossed), a pin, transitions to
    # DEPRECATED (nothing leaves it) and between types, new objects; every read equals the scan.
    random_sessions(writer, objs[:8], 25, rng, T0 + timedelta(days=1), "b")
    assert_objects_equal_live(ids)
    services.object_pin(client=admin, object_id=objs[2].pk, reason="ok", confidence=0.9, ts=NOW)
    assert_objects_equal_live(ids)
    services.object_transition(
        client=admin, object_id=objs[3].pk, to="DEPRECATED", reason="wrong", ts=NOW
    )
    services.object_transition(
        client=admin, object_id=objs[11].pk, to="DEPRECATED", reason="wrong", ts=NOW
    )
    assert_objects_equal_live(ids)
    services.object_transition(
        client=admin, object_id=objs[4].pk, to="OBSERVED", reason="seen", ts=NOW
    )
    late = objects(writer, 3, prefix="late") + objects(writer, 1, "billing", "late bill")
    after = assert_objects_equal_live(ids)
    assert after != before
    # The next run counts it all; a rerun writes the same rows.
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert assert_objects_equal_live(ids) == after
    rows = stored_objects()
    assert len(rows[0]) == 15 + len(late)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert stored_objects() == rows
    services.object_unpin(client=admin, object_id=objs[2].pk, reason="no", ts=NOW)
    random_sessions(writer, objs, 10, rng, NOW + timedelta(hours=1), "c")
    assert_objects_equal_live(ids)


def test_a_penalty_moving_an_object_across_a_bin_after_the_run_moves_it_at_once(ns, admin):
    writer = make_client("w", "client", ["support"])[0]
    obj, other = objects(writer, 2)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    counted = assert_objects_equal_live([support])
    # A corrected signal: the object's confidence drops (a bin, or a few), nothing else moves.
    record(writer, session_body("s0", [(obj.pk, 40)], [(obj.pk, "CORRECTED", "explicit_user")]))
    now = assert_objects_equal_live([support])
    assert now != counted
    assert sum(now.values()) == sum(counted.values()) == 2
    obj.refresh_from_db()
    key = (support, obj.epistemic_type, aggregate_sums.confidence_bin(obj.confidence))
    assert now[key] >= 1


def test_the_object_counts_come_from_the_rollup_not_a_scan(ns):
    writer = make_client("w", "client", ["support"])[0]
    (obj,) = objects(writer, 1)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    (key,) = object_rollup.object_counts_live([support])
    # A stored count moved by hand shows in the read (corrected only for changed objects).
    ObjectBin.objects.filter(namespace_id=support).update(counted=7)
    if connection.vendor == "sqlite":
        # Nothing changed since the run: the read is the stored count.
        assert object_rollup.object_sums_by_namespace([support])[1] == {key: 7}
        assert overview.object_stats([support])[support].objects == 7
    # A write: the object is recounted, the stored count otherwise kept.
    services.object_pin(
        client=make_client("adm", "admin")[0], object_id=obj.pk, reason="ok", confidence=0.5
    )
    obj.refresh_from_db()
    got = object_rollup.object_sums_by_namespace([support])[1]
    assert sum(got.values()) == 7


def test_a_change_while_the_run_counts_is_read_at_once(ns, admin, monkeypatch):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 4)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    count = object_rollup.count_objects

    def changed_around_the_count():
        # One change after the bound and before the count (counted), one after the count and
        # before the mark is written (not counted: its operation is beyond the bound).
        services.object_pin(client=admin, object_id=objs[0].pk, reason="a", confidence=0.2)
        found = count()
        services.object_transition(client=admin, object_id=objs[1].pk, to="DEPRECATED", reason="b")
        return found

    monkeypatch.setattr(object_rollup, "count_objects", changed_around_the_count)
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    monkeypatch.setattr(object_rollup, "count_objects", count)
    assert_objects_equal_live([support])
    window_rollup.rollup_all(NOW + timedelta(hours=2))
    assert_objects_equal_live([support])


def test_before_the_objects_are_counted_the_read_is_live(ns):
    writer = make_client("w", "client", ["support"])[0]
    objects(writer, 3)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    # An upgraded deployment: aggregates counted by an earlier run, the objects not yet.
    WindowRollupMark.objects.update(objects_bound=None)
    ObjectBin.objects.update(counted=100)
    assert_objects_equal_live([support])
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().objects_bound is not None
    assert_objects_equal_live([support])


def test_a_retention_delete_of_state_operations_beyond_the_bound_makes_the_namespace_live(
    ns, admin
):
    writer = make_client("w", "client", ["support"])[0]
    objects(writer, 3)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    # An object written after the run with an old ts; the retention pass deletes its
    # operations before the next run: the read no longer finds it changed, so the namespace
    # is read live.
    (old,) = objects(writer, 1, prefix="old")
    ops = list(Operation.objects.filter(target_id=old.pk).values_list("ts", "seq"))
    with transaction.atomic():
        retention._delete([(iso(ts), seq) for ts, seq in ops], [])
    assert not Operation.objects.filter(target_id=old.pk).exists()
    assert WindowRollupMark.objects.get().aggregates_live == [support]
    assert_objects_equal_live([support])
    window_rollup.rollup_all(NOW + timedelta(hours=1))
    assert WindowRollupMark.objects.get().aggregates_live == []
    assert_objects_equal_live([support])


def test_an_erasure_leaves_the_counts_exact(ns, admin):
    from erasure import services as erasure_services

    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 3)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    body = {"subject": {"kind": "object", "id": str(objs[0].pk)}, "namespace": "support"}
    erasure = erasure_services.request(client=admin, body=body)
    assert erasure_services.run(erasure.pk)["state"] == "completed"
    assert_objects_equal_live([support])


def test_far_behind_the_writes_the_object_read_scans_and_still_equals(ns, admin, monkeypatch):
    writer = make_client("w", "client", ["support"])[0]
    objs = objects(writer, 4)
    support = Namespace.objects.get(name="support").pk
    window_rollup.rollup_all(NOW)
    for o in objs[:3]:
        services.object_pin(client=admin, object_id=o.pk, reason="ok", confidence=0.3)
    objects(writer, 2, prefix="new")
    scans = []
    live = object_rollup.object_counts_live
    monkeypatch.setattr(
        object_rollup, "object_counts_live", lambda ids: scans.append(list(ids)) or live(ids)
    )
    monkeypatch.setattr(object_rollup, "OBJECT_OPS_MAX", 3)
    object_rollup.object_sums_by_namespace([support])
    assert scans == [[], [support]]
    monkeypatch.undo()
    assert_objects_equal_live([support])


def test_state_changes_name_the_objects_changed_beyond_a_release_bound(ns, admin):
    writer = make_client("w", "client", ["support"])[0]
    a, b = objects(writer, 2)
    bound = store.get().release_bound()
    services.object_pin(client=admin, object_id=a.pk, reason="ok", confidence=0.4)
    record(writer, session_body("s0", [(b.pk, 10)]))  # an injection: no object-state operation
    found = store.get().state_changes(bound, ["support"])
    assert ("support", a.pk) in found
    if connection.vendor == "sqlite":  # on PostgreSQL the test's own transaction is running
        assert found == [("support", a.pk)]
    assert store.get().state_changes(bound, ["billing"]) == []
    assert len(store.get().state_changes(bound, ["support"], limit=1)) == 1
    assert store.get().state_changes(bound, before=T0 - timedelta(days=2)) == []
    assert ("support", a.pk) in store.get().state_changes(bound, before=NOW + timedelta(days=999))
