from django.db import migrations, models

#: SPEC §12's weights, the ranking every namespace had before retrieval profiles.
SPEC_WEIGHTS = {"similarity": 0.45, "hotness": 0.30, "utility": 0.25}


def keep_existing_scores(apps, schema_editor):
    """Namespaces that exist before profiles keep exactly the score they had: their weights
    are completed with SPEC §12's, so the new default profile applies to new namespaces only."""
    Namespace = apps.get_model("rms", "Namespace")
    for ns in Namespace.objects.all():
        weights = dict(ns.weights or {})
        if not set(SPEC_WEIGHTS) <= set(weights):
            ns.weights = {**SPEC_WEIGHTS, **weights}
            ns.save(update_fields=["weights"])


class Migration(migrations.Migration):
    dependencies = [
        ("rms", "0006_change_feed"),
    ]

    operations = [
        migrations.AddField(
            model_name="namespace",
            name="retrieval",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(keep_existing_scores, migrations.RunPython.noop),
    ]
