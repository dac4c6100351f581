# Joins the partitioned operation log with the parallel migrations of the same round.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rms", "0010_partition_operation_log"),
        ("rms", "0012_merge_operation_hashes_bytea"),
    ]

    operations = []
