# The task-run models move here from ``feedback``. Their tables stay where they are, under the
# names they had (``db_table``), so this changes Django's state only: no table is created,
# renamed or copied, and every row stays. ``feedback/migrations/0014_task_runs_move_to_taskruns``
# drops them from the feedback app's state.

import uuid

import django.db.models.deletion
from django.db import migrations, models

MODELS = ("taskrun", "taskchunk", "workerheartbeat")


def move_content_types(apps, schema_editor):
    """Existing content types (and the permissions pointing at them) follow the models."""
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    content_types.filter(app_label="feedback", model__in=MODELS).exclude(
        model__in=content_types.filter(app_label="taskruns").values("model")
    ).update(app_label="taskruns")


def restore_content_types(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(
        schema_editor.connection.alias
    )
    content_types.filter(app_label="taskruns", model__in=MODELS).exclude(
        model__in=content_types.filter(app_label="feedback").values("model")
    ).update(app_label="feedback")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("feedback", "0013_injection_object_index_covers_session"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="TaskRun",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=uuid.uuid4,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("kind", models.CharField(max_length=40)),
                        ("params", models.JSONField(blank=True, default=dict)),
                        ("state", models.CharField(default="queued", max_length=10)),
                        ("progress", models.FloatField(default=0.0)),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True, default="")),
                        ("created_by", models.CharField(blank=True, default="", max_length=150)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "feedback_taskrun",
                        "ordering": ["-created_at"],
                        "indexes": [
                            models.Index(fields=["kind", "created_at"], name="task_kind_created"),
                            models.Index(fields=["state", "created_at"], name="task_state_created"),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="WorkerHeartbeat",
                    fields=[
                        (
                            "name",
                            models.CharField(max_length=200, primary_key=True, serialize=False),
                        ),
                        ("started_at", models.DateTimeField()),
                        ("seen_at", models.DateTimeField()),
                    ],
                    options={"db_table": "feedback_workerheartbeat"},
                ),
                migrations.CreateModel(
                    name="TaskChunk",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("index", models.PositiveIntegerField()),
                        ("table", models.CharField(max_length=40)),
                        ("lo", models.CharField(blank=True, max_length=64, null=True)),
                        ("hi", models.CharField(blank=True, max_length=64, null=True)),
                        ("state", models.CharField(default="queued", max_length=10)),
                        ("attempts", models.PositiveIntegerField(default=0)),
                        ("hostname", models.CharField(blank=True, default="", max_length=200)),
                        ("progress", models.FloatField(default=0.0)),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True, default="")),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("sent_at", models.DateTimeField(blank=True, null=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "run",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="chunks",
                                to="taskruns.taskrun",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "feedback_taskchunk",
                        "indexes": [
                            models.Index(fields=["state", "heartbeat_at"], name="chunk_state_beat")
                        ],
                        "constraints": [
                            models.UniqueConstraint(fields=("run", "index"), name="chunk_run_index")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types, elidable=True),
    ]
