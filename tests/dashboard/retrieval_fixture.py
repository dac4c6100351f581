"""The retrieval-quality fixture shared by the retrieval page's and the rollup's tests: four
sessions with known ranks and signals on three days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rms.models import Namespace
from tests.dashboard.conftest import record, session_body
from tests.factories import make_client, make_object

#: "Now" for these tests: the fixture's sessions lie on the three days before it.
NOW = datetime(2026, 6, 10, 15, 0, tzinfo=UTC)
DAY1, DAY2, DAY3 = (datetime(2026, 6, d, 9, 0, tzinfo=UTC) for d in (7, 8, 9))


def _at(ts: datetime) -> float:
    """``session_body``'s ``hours`` for a session at ``ts``."""
    return (ts - datetime(2026, 6, 1, tzinfo=UTC)).total_seconds() / 3600


def build_fixture():
    """Four sessions, each injecting a, b, c at ranks 1, 2, 3 (token costs 10, 20, 30):

    - day 1, s1: a used (REFERENCED)                      → best rank 1
    - day 1, s2: b used (CONFIRMED), c CORRECTED (not used) → best rank 2
    - day 2, s3: nothing used                              → no hit
    - day 3, s4: c used (TASK_COMPLETED_WITH) by "other"   → best rank 3
    """
    writer = make_client("writer", "client", ["support"])[0]
    other = make_client("other", "client", ["support"])[0]
    a, b, c = (make_object(writer, content=f"fact {x}", ts=DAY1 - timedelta(days=2)) for x in "abc")
    inj = [(a.pk, 10), (b.pk, 20), (c.pk, 30)]
    record(writer, session_body("s1", inj, [(a.pk, "REFERENCED", "observation")], hours=_at(DAY1)))
    record(
        writer,
        session_body(
            "s2",
            inj,
            [(b.pk, "CONFIRMED", "explicit_user"), (c.pk, "CORRECTED", "explicit_user")],
            hours=_at(DAY1 + timedelta(hours=2)),
        ),
    )
    record(writer, session_body("s3", inj, [], hours=_at(DAY2)))
    record(
        other,
        session_body("s4", inj, [(c.pk, "TASK_COMPLETED_WITH", "observation")], hours=_at(DAY3)),
    )
    return Namespace.objects.get(name="support")
