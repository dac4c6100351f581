"""Test data builders. Objects are created through the services, never raw, so every object in
a test has its OBJECT_CREATED operation and a valid chain."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from rms import services
from rms.api.auth import new_token, token_digest
from rms.models import ApiClient, Namespace


class NamespaceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Namespace
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"ns-{n}")


def make_namespace(name: str, **kw) -> Namespace:
    return NamespaceFactory(name=name, **kw)


def make_client(name: str, role: str, namespaces: list[str] | None = None):
    """An ApiClient with a fresh token; returns (client, token)."""
    user = get_user_model().objects.create(username=name)
    token = new_token()
    client = ApiClient.objects.create(
        user=user, name=name, role=role, token_hash=token_digest(token)
    )
    for ns in namespaces or []:
        client.namespaces.add(make_namespace(ns))
    return client, token


def make_object(client: ApiClient, namespace: str = "support", **fields):
    item = {"namespace": namespace, "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}
    item.update(fields)
    return services.object_create(client=client, items=[item])[0]
