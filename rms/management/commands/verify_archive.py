"""``verify_archive [--namespace NS]``: check the retention archive against its manifest, the
chains and the database (``rms.archive_verify.verify_archive``). Prints the result as JSON;
exits 1 when anything is wrong."""

import json

from django.core.management.base import BaseCommand, CommandError

from rms.archive_verify import verify_archive


class Command(BaseCommand):
    help = "Verify the retention archive's files against the manifest and the chains."

    def add_arguments(self, parser):
        parser.add_argument("--namespace", default=None)

    def handle(self, *args, namespace, **options):
        result = verify_archive(namespace)
        self.stdout.write(json.dumps(result, indent=2))
        if not result["ok"]:
            raise CommandError(f"verify_archive found {result['mismatch_count']} mismatch(es)")
