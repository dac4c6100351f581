"""``partition_operation_log [--undo]``: turn the operation log into a table partitioned by day
on ``ts`` (PostgreSQL), so the retention pass drops whole archived days instead of deleting
rows; ``--undo`` swaps it back to one plain table. Prints the result as JSON.

An operator's scheduled step, not a migration: the copy and swap (``rms.store.partitions``)
copies every row of the log under an exclusive lock, which on a large log takes as long as
copying the table, and a log kept forever gains a partition a day, which reads without a time
bound (the change feed, an object's chain) each probe. Worth it where retention is set.
"""

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.utils import timezone

from rms.store import partitions


class Command(BaseCommand):
    help = "Partition the operation log by day (PostgreSQL); --undo makes it one table again."

    def add_arguments(self, parser):
        parser.add_argument("--undo", action="store_true", help="back to one plain table")

    def handle(self, *args, undo, **options):
        if connection.vendor != "postgresql":
            raise CommandError("the operation log is partitioned on PostgreSQL only")
        with transaction.atomic():
            if undo:
                result = partitions.unconvert(connection)
            else:
                result = partitions.convert(connection, timezone.now())
        result["partitioned"] = partitions.is_partitioned(connection)
        self.stdout.write(json.dumps(result, indent=2))
