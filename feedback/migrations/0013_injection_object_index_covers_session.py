"""The sweep reads an object's last ``streak`` sessions from the index alone (its cost stays flat as the log grows): the
new index is built before the old one goes, so no moment is without one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0012_event_tables_insert_vacuum"),
        ("rms", "0006_change_feed"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="injectionevent",
            index=models.Index(
                fields=["object", "-ts", "-id"], include=("session",), name="inj_obj_ts_id"
            ),
        ),
        migrations.RemoveIndex(
            model_name="injectionevent",
            name="inj_obj_ts",
        ),
    ]
