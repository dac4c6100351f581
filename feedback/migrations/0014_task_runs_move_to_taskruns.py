# The task-run models now belong to the ``taskruns`` app, which took them over with their
# tables (``taskruns/migrations/0001_initial.py``). This drops them from the feedback app's state
# only: the tables and their rows stay.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0013_injection_object_index_covers_session"),
        ("taskruns", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="TaskChunk"),
                migrations.DeleteModel(name="TaskRun"),
                migrations.DeleteModel(name="WorkerHeartbeat"),
            ],
            database_operations=[],
        ),
    ]
