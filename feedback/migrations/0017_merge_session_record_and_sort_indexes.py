# Joins parallel migrations: the session record rebuilt from the log and the sort indexes.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0016_aggregate_sort_indexes"),
        ("feedback", "0016_session_record_from_log"),
    ]

    operations = []
