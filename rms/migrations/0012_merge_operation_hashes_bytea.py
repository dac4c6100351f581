# Joins parallel migrations: operation hashes as bytea beside the deployment id and trigram index.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rms", "0010_operation_hashes_bytea"),
        ("rms", "0011_merge_deployment_and_trigram"),
    ]

    operations = []
