"""A session row no longer stores its record: new rows leave the column NULL and the record is
rebuilt from the session's FEEDBACK_SESSION operation (``feedback.session_record``,
docs/DECISIONS.md "Disk per session"). The field is renamed ``stored_record`` in Python, its
column stays ``record``; existing rows keep theirs."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("feedback", "0015_retrieval_day_rollup")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField("feedbacksession", "record", "stored_record"),
                migrations.AlterField(
                    model_name="feedbacksession",
                    name="stored_record",
                    field=models.JSONField(blank=True, db_column="record", null=True),
                ),
            ],
            database_operations=[
                migrations.AlterField(
                    model_name="feedbacksession",
                    name="record",
                    field=models.JSONField(blank=True, null=True),
                ),
            ],
        )
    ]
