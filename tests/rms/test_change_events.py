"""The change events are defined once (``rms.events.EVENTS``): the SQL that writes them on
PostgreSQL is compiled from that definition and equals the Python form for every event type,
and the partial indexes' list of change operations follows the code through ``migrate``."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection

from rms import changes, events
from rms.models import Operation

pytestmark = pytest.mark.django_db(transaction=True)

INDEXES = ("op_change_feed", "op_change_ns")


def indexed_ops() -> dict[str, set[str]]:
    """The operation names each change index's predicate lists, read from the database."""
    if connection.vendor == "postgresql":
        sql = "SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN (%s, %s)"
    else:
        sql = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN (%s, %s)"
    with connection.cursor() as cursor:
        cursor.execute(sql, INDEXES)
        rows = cursor.fetchall()
    return {name: set(re.findall(r"'([^']*)'", d.split(" WHERE ", 1)[1])) for name, d in rows}


def test_the_change_indexes_name_exactly_the_change_operations_in_code():
    assert indexed_ops() == {name: set(events.CHANGE_OPS) for name in INDEXES}


def test_migrate_rebuilds_change_indexes_whose_operations_differ_from_the_code():
    # A database whose indexes were built from an older list of change operations.
    columns = {"op_change_feed": ("txid, seq", "seq"), "op_change_ns": ("namespace, txid, seq",
               "namespace, seq")}  # fmt: skip
    with connection.cursor() as cursor:
        for name, (pg, other) in columns.items():
            cursor.execute(f"DROP INDEX {name}")
            cols = pg if connection.vendor == "postgresql" else other
            cursor.execute(
                f"CREATE INDEX {name} ON rms_operation ({cols}) WHERE op_type IN ('PIN', 'UNPIN')"
            )
    assert indexed_ops() == {name: {"PIN", "UNPIN"} for name in INDEXES}

    call_command("migrate", verbosity=0)

    assert indexed_ops() == {name: set(events.CHANGE_OPS) for name in INDEXES}


def _row_of(spec: events.EventSpec, n: int) -> dict:
    """An operation of ``spec``'s type, every field of every shape filled in."""
    state = {"confidence": 0.625, "salience_base": 0.5, "epistemic_type": spec.to or "ASSERTED",
             "condition_state": "TRUE", "decay_profile": "SLOW", "pinned": True,
             "reinforcement_count": n, "version": n + 1, "alpha": 2.5, "beta": 1.25}  # fmt: skip
    payload = {"signal_type": "CONFIRMED", "session_id": f"s-{n}", "to": spec.to or "OBSERVED",
               "metric": "high_correction_rate", "value": 0.3, "threshold": 0.1,
               "window": {"since": "2026-05-31T12:00:00+00:00"}, "alert_id": f"a-{n}",
               "utility": 0.5625, "uses": n, "last_use_at": "2026-05-31T12:00:00.000001+00:00",
               "version": n + 1}  # fmt: skip
    return {"op_type": spec.op, "state": state, "payload": payload}


@pytest.mark.postgres
def test_the_sql_events_equal_the_python_events_for_every_event_type(require_postgres):
    start = changes.head()
    for n, spec in enumerate(events.EVENTS):
        Operation.objects.create(
            ts=datetime(2026, 6, 1, 12, 0, n, 123456, tzinfo=UTC), target_type="memory_object",
            target_id=uuid.uuid4(), namespace="support", actor_id="a",
            actor_type="SYSTEM_PROCESS", prev_hash="0" * 64, hash="0" * 64, **_row_of(spec, n),
        )  # fmt: skip
    every = frozenset(events.FEED_TYPES)  # the opt-in types too
    reference = changes.read(start, limit=1000, types=every).events
    texts = [
        json.loads(t) for t in changes.read(start, limit=1000, as_json=True, types=every).events
    ]
    assert [e["type"] for e in reference] == [spec.type for spec in events.EVENTS]
    assert texts == reference
    for event, spec in zip(reference, events.EVENTS, strict=True):
        assert list(event) == list(events.ENVELOPE)
        assert list(event["data"]) == [field.key for field in spec.data]


# An event type over a new operation, added to rms/events.py and nowhere else.
ADDED = '    EventSpec("object.archived", "ARCHIVE", OBJECT_FIELDS),\n'
ADD_ONE_TYPE = """
import importlib.util, json, pathlib, sys, uuid
from datetime import UTC, datetime

import rms.policy, rms.replay  # what rms.events imports

path = pathlib.Path("rms/events.py")
source = path.read_text()
marker = "EVENTS: tuple[EventSpec, ...] = (\\n"
assert source.count(marker) == 1
source = source.replace(marker, marker + ADDED)
module = importlib.util.module_from_spec(importlib.util.spec_from_loader("rms.events", None))
module.__file__ = str(path)
sys.modules["rms.events"] = module
exec(compile(source, str(path), "exec"), module.__dict__)

import django

django.setup()
from django.core.management import call_command
from django.db import connection

from rms import changes
from rms.models import Operation
from rms.store.feed import indexed_change_ops

call_command("migrate", verbosity=0)
start = changes.head()
Operation.objects.create(
    ts=datetime(2026, 6, 1, 12, 0, 0, 123456, tzinfo=UTC), op_type="ARCHIVE",
    target_type="memory_object", target_id=uuid.uuid4(), namespace="support", actor_id="a",
    actor_type="SYSTEM_PROCESS", payload={}, state={"confidence": 0.5, "version": 3},
    prev_hash="0" * 64, hash="0" * 64,
)
print(json.dumps({
    "reference": changes.read(start, limit=10).events,
    "texts": [json.loads(t) for t in changes.read(start, limit=10, as_json=True).events],
    "indexed": {name: sorted(ops) for name, ops in indexed_change_ops(connection).items()},
}))
"""


@pytest.mark.postgres
def test_an_event_type_added_in_rms_events_alone_reaches_the_feed_sql_and_indexes(
    require_postgres,
):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url}
    root = Path(settings.BASE_DIR)
    script = f"ADDED = {ADDED!r}\n" + ADD_ONE_TYPE
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout.strip().splitlines()[-1])
        assert [e["type"] for e in found["reference"]] == ["object.archived"]
        assert found["texts"] == found["reference"]
        assert found["reference"][0]["data"]["version"] == 3
        every = sorted({*events.CHANGE_OPS, "ARCHIVE"})
        assert found["indexed"] == {name: every for name in INDEXES}
    finally:
        # Back to the code's list: the next migrate rebuilds the indexes without ARCHIVE.
        call_command("migrate", verbosity=0)
    assert indexed_ops() == {name: set(events.CHANGE_OPS) for name in INDEXES}
