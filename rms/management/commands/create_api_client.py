"""``create_api_client NAME --role R [--namespace NS ...] [--password P]`` (API.md).

Creates or rotates a client and prints its token as the last line of stdout.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from rms.api.auth import new_token, token_digest
from rms.models import ApiClient, Namespace


class Command(BaseCommand):
    help = "Create (or rotate) an API client and print its token as the last line."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--role", choices=ApiClient.ROLES, default=ApiClient.ROLE_CLIENT)
        parser.add_argument("--namespace", action="append", default=[], dest="namespaces")
        parser.add_argument("--password", default=None)

    @transaction.atomic
    def handle(self, *args, name, role, namespaces, password, **options):
        if not name.strip():
            raise CommandError("NAME must not be empty.")
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(username=name)
        if password:
            user.set_password(password)
        else:
            user.set_unusable_password()
        # An admin with a password may also use the Django admin site.
        user.is_staff = user.is_superuser = role == ApiClient.ROLE_ADMIN and bool(password)
        user.save()
        token = new_token()
        client, created = ApiClient.objects.update_or_create(
            user=user, defaults={"name": name, "role": role, "token_hash": token_digest(token)}
        )
        for ns_name in namespaces:
            ns, _ = Namespace.objects.get_or_create(name=ns_name)
            client.namespaces.add(ns)
        verb = "Created" if created else "Rotated"
        self.stdout.write(
            f"{verb} {role} client {name!r}; namespaces: {', '.join(namespaces) or '-'}"
        )
        self.stdout.write(token)
