"""The operation log partitioned by day on ``ts`` (PostgreSQL; a no-op elsewhere).

Copy and swap inside this migration's transaction (``rms.store.partitions.convert``): a
partitioned table is created from the live table's definition as the catalog has it (columns,
defaults, identity, the ``txid`` column of 0006, constraints, indexes, storage parameters), so a
column or index another migration changed before this one is carried; the rows are copied, the
old table dropped and the new one renamed. Its primary key is ``(seq, ts)`` (a partitioned
table's keys must hold the partition key); the model keeps ``seq`` as its primary key. Day
partitions cover the existing rows (up to ``HISTORY_DAYS`` back) and ``AHEAD_DAYS`` ahead; a
default partition catches the rest. No foreign key points at the log (``convert`` drops and
reports one if it finds it). The reverse swaps back to one plain table keyed by ``seq``.
"""

from django.db import migrations
from django.utils import timezone

from rms.store import partitions


def _partition(apps, schema_editor):
    partitions.convert(schema_editor.connection, timezone.now())


def _unpartition(apps, schema_editor):
    partitions.unconvert(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("rms", "0012_merge_operation_hashes_bytea")]

    operations = [migrations.RunPython(_partition, _unpartition)]
