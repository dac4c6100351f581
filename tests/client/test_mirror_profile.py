"""The score mirror follows a change of its namespace's retrieval profile through the feed
(``namespace.profile_changed``), against the live server: after a PATCH of the weights and
rules it answers what ``POST /rank`` answers, to 1e-12, without ``refresh()``; the new profile
is kept in its state file."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from rms_client import RMSClient

from tests.client.conftest import FAST
from tests.client.mirrors import check_equal, new_objects, session
from tests.factories import make_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_mirror_rescores_with_a_patched_profile_without_refresh(live_server, tmp_path):
    rng = random.Random(21)
    admin = RMSClient(live_server.url, make_client("admin-w", "admin")[1], **FAST)
    weights = {"similarity": 0.45, "hotness": 0.30, "utility": 0.25}
    admin.create_namespace("tuned", weights=weights, retrieval={"conditions": "any"})
    c = RMSClient(live_server.url, make_client("cl-w", "client", ["tuned"])[1], **FAST)
    ids = new_objects(c, "tuned", rng, 15)
    for _ in range(6):
        c.record_session(session("tuned", rng, ids))
    path = tmp_path / "mirror.json"
    now = datetime.now(UTC)
    refreshes = []
    with c.mirror("tuned", state_file=path) as mirror:
        mirror.refresh = lambda: refreshes.append(1)  # must not be needed
        assert mirror.wait_until_current(timeout=30)
        before = check_equal(mirror, c, "tuned", ids, now, random.Random(1))
        new = {"similarity": 0.1, "hotness": 0.2, "utility": 0.1, "confidence": 0.4,
               "salience": 0.2}  # fmt: skip
        rules = {"confidence_floor": 0.6, "conditions": "met"}
        admin.update_namespace("tuned", weights=new, retrieval=rules)
        assert mirror.wait_until_current(timeout=30)
        assert mirror.profile == {"weights": new, **rules}
        for later in (0, 5):
            after = check_equal(mirror, c, "tuned", ids, now + timedelta(days=later),
                                random.Random(1))  # fmt: skip
        # The profile really changed the answer: scores (and eligibility) moved.
        moved = {r["object_id"]: r["score"] for r in before}
        assert any(abs(moved[r["object_id"]] - r["score"]) > 1e-6 for r in after)
        c.record_session(session("tuned", rng, ids))  # later events score with the new one
        assert mirror.wait_until_current(timeout=30)
        check_equal(mirror, c, "tuned", ids, now, random.Random(2))
    assert refreshes == []
    saved = json.loads(path.read_text())
    assert saved["profile"] == {"weights": new, **rules}
    assert "namespace.profile_changed" in saved["event_types"]
    with c.mirror("tuned", state_file=path) as again:
        assert again.profile == {"weights": new, **rules}
        assert again.wait_until_current(timeout=30)
        check_equal(again, c, "tuned", ids, now, random.Random(3))
