"""The partitioned operation log (PostgreSQL): ``manage.py partition_operation_log`` converts a
log with rows (and back), and the retention pass drops a day partition whose rows are all
archived instead of deleting them."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from feedback import retention
from feedback.models import FeedbackSession
from rms import verification
from rms.archive_verify import verify_archive
from rms.models import ChainCheckpoint, Namespace, Operation
from rms.store import partitions, pgcopy
from tests.factories import T0, hourly_sessions
from tests.servers import subprocess_env

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
#: Sessions an hour apart from T0 + 1 h; a one-day retention at NOW cuts at T0 + 1 day, so the
#: day partition of T0 ends at the cut (dropped) and T0 + 1 day's is cut inside (rows deleted).
NOW = T0 + timedelta(days=2)
CUT = T0 + timedelta(days=1)
DAY0 = partitions.partition_name(T0.date())


@pytest.fixture
def archive_dir(tmp_path, settings):
    settings.RMS_ARCHIVE_URL = str(tmp_path / "archive")
    return tmp_path / "archive"


def day_partitions():
    """The log partitioned (the test database's log is one table, as a new deployment's), with
    day partitions for T0's days."""
    with transaction.atomic():
        partitions.convert(connection, T0 + timedelta(days=3))
        partitions.ensure(connection, T0.date() - timedelta(days=1), T0.date() + timedelta(days=4))


def unpartition():
    """A transactional test's conversion outlives it: back to one plain table."""
    with transaction.atomic():
        partitions.unconvert(connection)


def build(client_api, sessions: int, prefix: str = "part") -> list[str]:
    return hourly_sessions(client_api, sessions, prefix)


def retain(days=1):
    ns = Namespace.objects.get(name="support")
    ns.retention_days = days
    ns.save()
    return ns


def chain_ok() -> dict:
    return verification.verify_chain_all(
        extra_heads=FeedbackSession.objects.values_list("id", "head_hash"),
        extra_total=FeedbackSession.objects.count(),
    )


def rows() -> list[tuple]:
    return list(Operation.objects.order_by("seq").values_list("seq", "ts", "hash", "prev_hash"))


@pytest.mark.django_db(transaction=True)
def test_the_command_converts_a_log_with_rows_and_carries_a_later_change(client_api):
    try:
        assert not partitions.is_partitioned(connection)
        build(client_api, sessions=6)
        # what a migration could have done to the plain table before the command: carried over
        with connection.cursor() as cur:
            cur.execute("ALTER TABLE rms_operation ADD COLUMN probe integer NOT NULL DEFAULT 7")
            cur.execute("CREATE INDEX op_probe ON rms_operation (probe, ts)")
        before = rows()
        top = before[-1][0]
        assert chain_ok()["ok"]

        call_command("partition_operation_log", stdout=io.StringIO())

        assert partitions.is_partitioned(connection)
        assert rows() == before
        assert chain_ok()["ok"], chain_ok()
        assert verification.verify_replay_all()["ok"]
        with connection.cursor() as cur:
            cur.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                        "WHERE conrelid = 'rms_operation'::regclass AND contype = 'p'")  # fmt: skip
            assert cur.fetchone()[0] == "PRIMARY KEY (seq, ts)"
            cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'rms_operation'")
            names = {r[0] for r in cur.fetchall()}
            cur.execute("SELECT count(*) FROM rms_operation WHERE probe = 7")
            assert cur.fetchone()[0] == len(before)
        assert {"op_target_ts", "op_ns_type_ts", "op_change_feed", "op_probe"} <= names
        # T0's rows are older than today's partitions: a day partition was made for them
        assert DAY0 in {p.name for p in partitions.partitions(connection)}
        # new writes continue the sequence and the chains
        build(client_api, sessions=2, prefix="after")
        assert Operation.objects.order_by("seq").first().seq == before[0][0]
        assert min(s for s, *_ in rows()[len(before) :]) > top
        assert chain_ok()["ok"]
        # a second run changes nothing; the reverse swaps back to one plain table with every row
        out = io.StringIO()
        call_command("partition_operation_log", stdout=out)
        assert '"rows": 0' in out.getvalue() and partitions.is_partitioned(connection)
        call_command("partition_operation_log", undo=True, stdout=io.StringIO())
        assert not partitions.is_partitioned(connection)
        assert len(rows()) > len(before) and chain_ok()["ok"]
    finally:
        unpartition()
        with connection.cursor() as cur:
            cur.execute("ALTER TABLE rms_operation DROP COLUMN IF EXISTS probe")
            cur.execute("DROP INDEX IF EXISTS op_probe")


@pytest.mark.django_db
def test_the_pass_drops_a_partition_whose_rows_are_all_archived(client_api, archive_dir):
    day_partitions()
    ids = build(client_api, sessions=40)
    early = (T0 + timedelta(hours=5, minutes=30)).isoformat()
    early_state = client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": early}).json()
    total = Operation.objects.count()
    others = Operation.objects.exclude(target_type__in=retention.TARGETS).count()
    retain(1)

    result = retention.run_namespace(Namespace.objects.get(name="support"), NOW, batch=200)

    assert result["partitions_dropped"] == 1 and result["batches"] > 1
    assert DAY0 not in {p.name for p in partitions.partitions(connection)}
    assert Operation.objects.count() == total - result["operations"]
    # the namespace chain's rows of that day were copied to the default partition, not lost
    assert Operation.objects.exclude(target_type__in=retention.TARGETS).count() == others
    assert not Operation.objects.filter(ts__lt=CUT, target_type__in=retention.TARGETS).exists()
    assert not FeedbackSession.objects.filter(ts__lt=CUT).exists()
    assert ChainCheckpoint.objects.count() == 4
    assert chain_ok()["ok"], chain_ok()
    assert verification.verify_replay_all()["ok"]
    checked = verify_archive("support")
    assert checked["ok"], checked
    assert checked["operations"] == result["operations"]
    archived = client_api.get(f"/api/v1/objects/{ids[0]}/state", {"as_of": early})
    assert archived.status_code == 200 and archived.json() == early_state
    again = retention.run_namespace(Namespace.objects.get(name="support"), NOW)
    assert again["operations"] == 0


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import datetime
    import django
    django.setup()
    from feedback import retention
    from rms.models import Namespace
    from rms.store import partitions
    where = sys.argv[2]
    writes = []
    if where == "archiving":  # the first batch's files and manifest written, then killed
        write = retention._write_batch
        def killed(*args, **kw):
            writes.append(1)
            if len(writes) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return write(*args, **kw)
        retention._write_batch = killed
    else:  # inside the final transaction: rows deleted, the partition detached, not committed
        drop = partitions.drop
        def killed(*args, **kw):
            drop(*args, **kw)
            os.kill(os.getpid(), signal.SIGKILL)
        partitions.drop = killed
    retention.run_namespace(
        Namespace.objects.get(name="support"), datetime.fromisoformat(sys.argv[1]), batch=60
    )
    """
)


@pytest.mark.parametrize("where", ["archiving", "finishing", "archiving-by-seq"])
@pytest.mark.django_db(transaction=True)
def test_sigkilled_mid_pass_then_rerun(client_api, archive_dir, settings, where):
    try:
        day_partitions()
        build(client_api, sessions=40)
        total = Operation.objects.count()
        retain(1)
        env = subprocess_env(settings, RMS_ARCHIVE_URL=str(archive_dir))
        proc = subprocess.run(
            [sys.executable, "-c", KILLER, NOW.isoformat(), where.removesuffix("-by-seq")],
            env=env, cwd=ROOT, capture_output=True,
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
        # nothing applied yet: every row still there, the partition too, the chains verify
        assert Operation.objects.count() == total
        assert DAY0 in {p.name for p in partitions.partitions(connection)}
        assert chain_ok()["ok"]
        if where == "archiving-by-seq":  # as the version that read in seq order left it
            archive = retention.archive_for("support")
            manifest = archive.manifest()
            state = manifest["open"]
            # this log's seq order is its (ts, seq) order: the same rows are behind both cursors
            state["cursor"], state["after"] = state.pop("after")[1], None
            archive.write_manifest(manifest)

        result = retention.run_namespace(Namespace.objects.get(name="support"), NOW, batch=200)

        assert result["partitions_dropped"] == 1
        archived = verify_archive("support")
        assert archived["ok"], archived
        # every operation is in exactly one place: the database or the archive, never both
        assert Operation.objects.count() + archived["operations"] == total
        assert chain_ok()["ok"]
        assert verification.verify_replay_all()["ok"]
        assert not FeedbackSession.objects.filter(ts__lt=CUT).exists()
    finally:
        unpartition()


def test_the_old_log_is_read_range_by_range_one_partition_each(client_api):
    day_partitions()
    with connection.cursor() as cur:  # a day missing between two: its rows, the default's
        cur.execute(f"DROP TABLE {partitions.partition_name((T0 + timedelta(days=1)).date())}")
    day = timedelta(days=1)

    ranges = partitions.scan_ranges(connection, T0 + timedelta(days=2, hours=6))

    assert ranges == [
        (None, T0 - day), (T0 - day, T0), (T0, T0 + day), (T0 + day, T0 + 2 * day),
        (T0 + 2 * day, T0 + timedelta(days=2, hours=6)),
    ]  # fmt: skip
    assert partitions.scan_ranges(connection, T0 - 2 * day) == [(None, T0 - 2 * day)]


def test_only_the_sessions_a_batch_does_not_hold_whole_are_read_again(client_api):
    build(client_api, sessions=2)
    sid = str(FeedbackSession.objects.order_by("ts").values_list("id", flat=True)[0])
    chain = pgcopy.operations_of(Operation, retention.OP_COLUMNS, [sid])
    assert chain and all(op[5] == sid for op in chain)

    assert retention._partial_sessions(chain) == []
    # read from the middle (its start read by another batch, or archived): read again
    assert retention._partial_sessions([(*op[:13], "e" * 64, *op[14:]) for op in chain]) == [sid]
    # the session's head moved on (an operation after those read): read again
    FeedbackSession.objects.filter(id=sid).update(head_hash="f" * 64)
    assert retention._partial_sessions(chain) == [sid]


def test_a_planned_partition_found_with_more_rows_is_kept_and_its_archived_rows_deleted(
    client_api, archive_dir, monkeypatch
):
    day_partitions()
    build(client_api, sessions=40)
    total = Operation.objects.count()
    retain(1)
    counts = partitions.archivable_counts
    # as if a row had been committed into the partition behind the pass's cursor
    monkeypatch.setattr(
        partitions, "archivable_counts",
        lambda *a: {n: c + 1 for n, c in counts(*a).items()},
    )  # fmt: skip

    result = retention.run_namespace(Namespace.objects.get(name="support"), NOW, batch=200)

    assert result["partitions_dropped"] == 0 and result["operations"] > 0
    assert DAY0 in {p.name for p in partitions.partitions(connection)}
    assert Operation.objects.count() == total - result["operations"]
    assert not Operation.objects.filter(ts__lt=CUT, target_type__in=retention.TARGETS).exists()
    assert chain_ok()["ok"]
    assert verify_archive("support")["ok"]
