"""Vacuum the injection and session-scope tables after a fixed number of inserts.

The windowed metric sums of the overview read the newest rows of these tables through covering
indexes (``inj_ns_ts``, ``sessns_ns_ts``), which answer without the table only for pages the
visibility map marks all-visible, i.e. pages vacuumed since they were written. These tables are
insert-only, and autovacuum's default insert rule vacuums them after 1,000 + 20 % of their rows:
the unvacuumed tail grows with the table (at 4M injections, 800k rows: more than a week of the
growth bench's traffic), so the same 24-hour window is read from the heap at 10M operations
and from the index at 1M. A fixed threshold keeps that tail the same size at every size.
PostgreSQL only (storage parameters); a no-op elsewhere.
"""

from django.db import migrations

#: Rows inserted between two vacuums of each table, whatever its size (a day of the growth
#: bench's traffic is ~70k injections and ~7k session scopes).
INSERT_THRESHOLDS = {
    "feedback_injectionevent": 100_000,
    "feedback_sessionnamespace": 10_000,
}


def _set(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, rows in INSERT_THRESHOLDS.items():
        schema_editor.execute(
            f"ALTER TABLE {table} SET (autovacuum_vacuum_insert_scale_factor = 0, "
            f"autovacuum_vacuum_insert_threshold = {rows})"
        )


def _reset(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in INSERT_THRESHOLDS:
        schema_editor.execute(
            f"ALTER TABLE {table} RESET (autovacuum_vacuum_insert_scale_factor, "
            "autovacuum_vacuum_insert_threshold)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0011_task_chunks"),
    ]

    operations = [migrations.RunPython(_set, _reset)]
