"""This deployment's id (``rms.deployment``): the table and its one row, generated here once."""

from django.db import migrations, models


def create_id(apps, schema_editor):
    from rms.deployment import new_id

    Deployment = apps.get_model("rms", "Deployment")
    Deployment.objects.get_or_create(pk=1, defaults={"deployment_id": new_id()})


class Migration(migrations.Migration):
    dependencies = [("rms", "0009_merge_confidence_index_and_retention")]

    operations = [
        migrations.CreateModel(
            name="Deployment",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("deployment_id", models.CharField(max_length=16, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("id", 1)), name="deployment_one")
                ],
            },
        ),
        migrations.RunPython(create_id, migrations.RunPython.noop),
    ]
