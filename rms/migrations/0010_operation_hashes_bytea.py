"""The operation log's ``prev_hash`` and ``hash`` as 32 bytes (bytea) on PostgreSQL instead of 64
hex characters (docs/DECISIONS.md "Disk per session"). Existing digests are converted in place,
unchanged, so no chain is re-hashed; other databases keep the text column."""

from django.db import migrations

import rms.store.fields

COLUMNS = ["prev_hash", "hash"]


def forwards(apps, schema_editor):
    rms.store.fields.hash_columns_to_bytes(schema_editor, "rms_operation", COLUMNS)


def backwards(apps, schema_editor):
    rms.store.fields.hash_columns_to_text(schema_editor, "rms_operation", COLUMNS)


class Migration(migrations.Migration):
    dependencies = [("rms", "0009_merge_confidence_index_and_retention")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="operation",
                    name=name,
                    field=rms.store.fields.HashField(max_length=64),
                )
                for name in COLUMNS
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        )
    ]
