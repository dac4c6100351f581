"""The mirror's fast form of the score (per-object constants computed when an event is applied,
integer-microsecond clocks) is pinned to the reference copy ``rms_client.scoring`` and to the
server's ``feedback.retrieval`` to 1e-12, and orders as ``/rank`` does (its own live test is
``test_mirror.py``). Pure: no server."""

from __future__ import annotations

import math
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from rms_client import scoring
from rms_client.mirror import Mirror

from feedback import retrieval
from rms.replay import iso
from tests.strategies import inputs_st, profile_st, times, unit


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(inputs_st, min_size=1, max_size=12),
    profile=profile_st,
    sims=st.lists(unit, min_size=12, max_size=12),
    now=times,
)
def test_mirror_rank_equals_the_reference_score_to_1e_12(rows, profile, sims, now):
    server_profile = retrieval.profile_from(profile["weights"], profile["rules"])
    ids = [str(uuid.UUID(int=i + 1)) for i in range(len(rows))]
    snapshot = {
        "profile": retrieval.profile_out(server_profile),
        "feed_cursor": None,
        "results": [
            {
                **row,
                "object_id": oid,
                "version": 1,
                "created_at": iso(row["created_at"]),
                "last_reinforced_at": iso(row["last_reinforced_at"]),
                "last_use_at": iso(row["last_use_at"]),
            }
            for oid, row in zip(ids, rows, strict=True)
        ],
    }
    mirror = Mirror.from_snapshot("ns", snapshot)
    client_profile = scoring.profile_from_out(snapshot["profile"])
    pairs = list(zip(ids, sims, strict=False))
    expected = []
    for (oid, sim), row in zip(pairs, rows, strict=True):
        ours = retrieval.rank_one(retrieval.RankingInputs(**row), sim, now, server_profile)
        ref = scoring.rank_one(scoring.RankingInputs(**row), sim, now, client_profile)
        assert math.isclose(ref.score, ours.score, rel_tol=0, abs_tol=1e-12)
        expected.append(
            {
                "object_id": oid,
                "score": ours.score,
                "eligible": ours.eligible,
                "reason": ours.reason,
            }
        )
    got = mirror.rank(pairs, now=now)
    by_id = {r["object_id"]: r for r in got}
    for want in expected:
        have = by_id[want["object_id"]]
        assert (have["eligible"], have["reason"]) == (want["eligible"], want["reason"])
        assert math.isclose(have["score"], want["score"], rel_tol=0, abs_tol=1e-12)
    # /rank's order: eligible first, then best score, then id. Scores within 1e-12 of each
    # other may be ordered either way by the two computations; everything else must agree.
    keys = [retrieval.order_key(r["eligible"], r["score"], r["object_id"]) for r in got]
    for a, b in zip(keys, keys[1:], strict=False):
        assert a[0] < b[0] or (a[0] == b[0] and a[1] <= b[1] + 1e-12)
    for want in expected:
        assert mirror.get(want["object_id"])["object_id"] == want["object_id"]


def test_the_mirrors_event_types_are_the_snapshots():
    from rms_client import mirror

    from feedback.selectors import ranking_state
    from rms import events

    assert mirror.MIRROR_TYPES == ranking_state.MIRROR_TYPES
    assert mirror.RANKING_EVENT == events.OBJECT_RANKING
    # Every object event type of the feed (the mirror must see every change of its inputs).
    assert set(mirror.MIRROR_TYPES) == {
        *(t for t in events.FEED_TYPES if t.startswith("object.")),
        events.NAMESPACE_PROFILE_CHANGED,
    }
    assert mirror.PROFILE_EVENT == events.NAMESPACE_PROFILE_CHANGED
