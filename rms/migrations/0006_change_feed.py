"""The change feed and the namespaces' own chains (API.md "The closed loop").

On PostgreSQL every operation row records the transaction that wrote it (``txid``, ``xid8``):
existing rows get 0 (all committed long ago, so they come first, in ``seq`` order); new rows
get ``pg_current_xact_id()`` from the column default, whatever inserts them. Two partial
indexes cover only the change operations, so a feed page is one range read and ingestion's
injection and feedback-event rows do not pay for them. SQLite gets the same indexes on ``seq``.
Their predicate lists the change operations as ``rms.events`` has them when this runs; a later
change to that list rebuilds them after ``migrate`` (``rms.store.feed.sync_change_indexes``).
"""

import uuid

from django.db import migrations, models

from rms.store.feed import CHANGE_INDEXES, change_index_statements


def _feed_columns(apps, schema_editor):
    run = schema_editor.execute
    if schema_editor.connection.vendor == "postgresql":
        run("ALTER TABLE rms_operation ADD COLUMN txid xid8 NOT NULL DEFAULT '0'")
        run("ALTER TABLE rms_operation ALTER COLUMN txid SET DEFAULT pg_current_xact_id()")
    for statement in change_index_statements(schema_editor.connection.vendor):
        run(statement)


def _drop_feed_columns(apps, schema_editor):
    for name in CHANGE_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE rms_operation DROP COLUMN txid")


def _namespace_uids(apps, schema_editor):
    Namespace = apps.get_model("rms", "Namespace")
    for ns in Namespace.objects.filter(uid__isnull=True):
        ns.uid = uuid.uuid4()
        ns.save(update_fields=["uid"])


class Migration(migrations.Migration):
    dependencies = [("rms", "0005_drop_redundant_fk_indexes")]

    operations = [
        migrations.AddField(
            model_name="namespace",
            name="uid",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(_namespace_uids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="namespace",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, unique=True, editable=False),
        ),
        migrations.AddField(
            model_name="namespace",
            name="head_hash",
            field=models.CharField(default="0" * 64, max_length=64),
        ),
        migrations.AddField(
            model_name="namespace",
            name="last_op_ts",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(_feed_columns, _drop_feed_columns),
    ]
