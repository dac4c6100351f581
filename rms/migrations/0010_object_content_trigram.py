"""A trigram GIN index on ``UPPER(content)`` for the object listings' text search, on
PostgreSQL only (``rms.store.search``); a no-op on SQLite."""

from django.db import migrations

from rms.store.search import create_content_trigram_index, drop_content_trigram_index


def _create(apps, schema_editor):
    create_content_trigram_index(schema_editor)


def _drop(apps, schema_editor):
    drop_content_trigram_index(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("rms", "0009_merge_confidence_index_and_retention"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
