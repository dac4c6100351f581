"""The task-run models moved from ``feedback`` to ``taskruns`` with their tables: a database at
the schema before the move, with rows in every task-run table, migrates forward with every row
kept, and the task-run code works on those rows afterwards."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from taskruns import claims, heartbeat, runs
from taskruns.models import TaskChunk, TaskRun, WorkerHeartbeat

pytestmark = pytest.mark.django_db(transaction=True)

#: The schema before the move: feedback's last migration then, and no taskruns app yet.
OLD_FEEDBACK = ("feedback", "0013_injection_object_index_covers_session")
BEFORE = [OLD_FEEDBACK, ("taskruns", None)]
T0 = datetime(2026, 6, 1, 12, tzinfo=UTC)


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


def _state_before(executor: MigrationExecutor):
    """The models as they were before the move: every other app as it is now."""
    graph = executor.loader.graph
    others = [n for n in graph.leaf_nodes() if n[0] not in ("feedback", "taskruns")]
    return executor.loader.project_state([OLD_FEEDBACK, *others])


def _old_rows(old_apps) -> dict:
    """Rows written through the models as they were before the move (historical models)."""
    Run = old_apps.get_model("feedback", "TaskRun")
    Chunk = old_apps.get_model("feedback", "TaskChunk")
    Beat = old_apps.get_model("feedback", "WorkerHeartbeat")
    done = Run.objects.create(
        kind="verify_chain", params={"chunk_size": 2}, state="succeeded", progress=1.0,
        result={"ok": True, "checked": 7}, created_by="admin", started_at=T0,
        finished_at=T0 + timedelta(seconds=3), attempts=1, sent_at=T0, heartbeat_at=T0,
    )  # fmt: skip
    queued = Run.objects.create(kind="metric_snapshot", params={}, created_by="operator")
    fanned = Run.objects.create(
        kind="ignored_sweep", params={"chunk_size": 1000}, state="running", attempts=1,
        started_at=T0, heartbeat_at=T0,
    )  # fmt: skip
    chunk = Chunk.objects.create(run=fanned, index=0, table="objects", lo=None, hi="m")
    Chunk.objects.create(run=fanned, index=1, table="objects", lo="m", hi=None)
    Beat.objects.create(name="celery@old", started_at=T0, seen_at=T0)
    # The content type and a permission of a moved model, as Django kept them for ``feedback``.
    OldContentType = old_apps.get_model("contenttypes", "ContentType")
    OldPermission = old_apps.get_model("auth", "Permission")
    OldContentType.objects.filter(app_label="taskruns").delete()
    content_type, _ = OldContentType.objects.get_or_create(app_label="feedback", model="taskrun")
    permission, _ = OldPermission.objects.get_or_create(
        content_type=content_type, codename="view_taskrun", defaults={"name": "Can view task run"}
    )
    return {"done": done.pk, "queued": queued.pk, "fanned": fanned.pk, "chunk": chunk.pk,
            "content_type": content_type.pk, "permission": permission.pk}  # fmt: skip


def test_a_database_at_the_old_schema_migrates_with_its_task_runs_kept(admin_api):
    executor = _migrate(BEFORE)
    old_apps = _state_before(executor).apps
    assert {m._meta.db_table for m in old_apps.get_app_config("feedback").get_models()} >= {
        "feedback_taskrun", "feedback_taskchunk", "feedback_workerheartbeat",
    }  # fmt: skip
    ids = _old_rows(old_apps)

    _migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    # Every row is there, under the new app's models, with its values.
    assert TaskRun.objects.count() == 3
    done = TaskRun.objects.get(pk=ids["done"])
    assert (done.kind, done.state, done.progress, done.result, done.attempts) == (
        "verify_chain", "succeeded", 1.0, {"ok": True, "checked": 7}, 1,
    )  # fmt: skip
    assert (done.params, done.created_by, done.finished_at) == (
        {"chunk_size": 2}, "admin", T0 + timedelta(seconds=3),
    )  # fmt: skip
    fanned = TaskRun.objects.get(pk=ids["fanned"])
    assert [(c.index, c.lo, c.hi) for c in fanned.chunks.order_by("index")] == [
        (0, None, "m"), (1, "m", None),
    ]  # fmt: skip
    assert list(WorkerHeartbeat.objects.values_list("name", "seen_at")) == [("celery@old", T0)]

    # The moved content type kept its id (and the permission pointing at it).
    content_type = ContentType.objects.get_for_model(TaskRun)
    assert (content_type.pk, content_type.app_label) == (ids["content_type"], "taskruns")
    assert content_type.permission_set.filter(pk=ids["permission"]).exists()
    assert not ContentType.objects.filter(app_label="feedback", model="taskrun").exists()

    # The task-run code works on the migrated rows: the API reads them, a queued run and a
    # chunk of the running run are claimed, a new chunk takes the next key of the same table.
    r = admin_api.get(f"/api/v1/tasks/{ids['done']}")
    assert r.status_code == 200, r.content
    assert (r.json()["kind"], r.json()["state"], r.json()["result"]) == (
        "verify_chain", "succeeded", {"ok": True, "checked": 7},
    )  # fmt: skip
    listed = admin_api.get("/api/v1/tasks?state=queued").json()["results"]
    assert [t["id"] for t in listed] == [str(ids["queued"])]
    assert claims.run_claim(ids["queued"]).state == TaskRun.RUNNING
    chunk = claims.chunk_claim(ids["chunk"], "celery@new")
    assert (chunk.state, chunk.hostname, chunk.run_id) == ("running", "celery@new", fanned.pk)
    added = TaskChunk.objects.create(run=fanned, index=2, table="objects", lo="z")
    assert added.pk > ids["chunk"] + 1
    assert runs.task_out(TaskRun.objects.get(pk=ids["fanned"]))["state"] == "running"

    # /health's worker liveness reads the kept heartbeat table.
    assert heartbeat.worker_liveness()["alive"] == 0
    WorkerHeartbeat.objects.create(name="celery@new", started_at=timezone.now(),
                                   seen_at=timezone.now())  # fmt: skip
    assert heartbeat.worker_liveness()["alive"] == 1

    # Deleting a run still cascades to its chunks through the kept foreign key.
    TaskRun.objects.filter(pk=ids["fanned"]).delete()
    assert TaskChunk.objects.count() == 0


def test_the_move_changes_no_table():
    """Both migrations of the move are state-only: their SQL is empty on this database."""
    executor = MigrationExecutor(connection)
    moved = [
        executor.loader.get_migration("taskruns", "0001_initial"),
        executor.loader.get_migration("feedback", "0014_task_runs_move_to_taskruns"),
    ]
    state = _state_before(executor)
    statements = []
    for migration in moved:
        with connection.schema_editor(collect_sql=True, atomic=False) as editor:
            state = migration.apply(state, editor, collect_sql=True)
        statements += [s for s in editor.collected_sql if not s.startswith("--")]
    assert statements == []
    assert {m._meta.db_table for m in (TaskRun, TaskChunk, WorkerHeartbeat)} == {
        "feedback_taskrun", "feedback_taskchunk", "feedback_workerheartbeat",
    }  # fmt: skip
