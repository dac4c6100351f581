"""The session-scope index covers the windowed session sums."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0006_drop_redundant_fk_indexes"),
        ("rms", "0005_drop_redundant_fk_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="sessionnamespace",
            name="sessns_ns_ts",
        ),
        migrations.AddIndex(
            model_name="sessionnamespace",
            index=models.Index(
                fields=["namespace", "ts"],
                include=("context_budget", "has_corrected"),
                name="sessns_ns_ts",
            ),
        ),
    ]
