"""Aggregates keep the token cost of their injections (all-time budget_waste_ratio)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("feedback", "0004_covering_indexes"),
        ("rms", "0004_covering_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="feedbackaggregate",
            name="agg_ns_usage",
        ),
        migrations.AddField(
            model_name="feedbackaggregate",
            name="total_token_cost",
            field=models.PositiveBigIntegerField(default=0),
        ),
        # Existing aggregates get the token cost of the injections already recorded.
        migrations.RunSQL(
            """
            UPDATE feedback_feedbackaggregate SET total_token_cost = COALESCE(
                (SELECT SUM(i.token_cost) FROM feedback_injectionevent i
                 WHERE i.object_id = feedback_feedbackaggregate.object_id), 0)
            """,
            migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name="feedbackaggregate",
            index=models.Index(
                fields=["namespace", "usage_ratio"],
                include=("object", "total_injections", "total_token_cost", "unused_sessions"),
                name="agg_ns_usage",
            ),
        ),
    ]
