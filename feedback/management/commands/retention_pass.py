"""``retention_pass``: one retention pass now (``feedback.retention.run_all``), as beat runs
it every RMS_RETENTION_EVERY s. Prints the counts as JSON."""

import json

from django.core.management.base import BaseCommand

from feedback import retention


class Command(BaseCommand):
    help = "Move what is older than each namespace's retention period to the archive."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(retention.run_all()))
