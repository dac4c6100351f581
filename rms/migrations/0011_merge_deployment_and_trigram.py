# Joins two parallel 0010 migrations (the deployment id and the content trigram index).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("rms", "0010_deployment"),
        ("rms", "0010_object_content_trigram"),
    ]

    operations = []
