"""The OpenAPI shapes of ``/erasures`` (API.md), for the schema only: the views answer plain
dicts; ``tests/rms/test_openapi.py`` validates real answers against these."""

from __future__ import annotations

from rest_framework import serializers

from erasure.models import Erasure
from rms.api import openapi as core_openapi


class SubjectIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Erasure.KINDS)
    id = serializers.CharField(
        required=False, help_text="Object id, actor id or session id; omitted for a namespace."
    )


class ErasureIn(serializers.Serializer):
    subject = SubjectIn()
    namespace = serializers.CharField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500)


class ErasureQueued(serializers.Serializer):
    id = serializers.UUIDField(help_text="The erasure; its receipt is GET /erasures/{id}.")
    task = serializers.UUIDField(help_text="The task run that performs it (GET /tasks/{id}).")
    warnings = core_openapi.degraded_warnings(
        "Present when the task queue was unreachable: the erasure is recorded and starts when "
        "it is back."
    )


class SubjectOut(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Erasure.KINDS)
    id = serializers.CharField(help_text="An actor's pseudonym, never the raw actor id.")


class Receipt(serializers.Serializer):
    id = serializers.UUIDField()
    subject = SubjectOut()
    namespace = serializers.CharField()
    state = serializers.ChoiceField(
        choices=[Erasure.QUEUED, Erasure.RUNNING, Erasure.COMPLETED, Erasure.FAILED],
        help_text="`running` after a worker was lost midway means nothing was erased yet; "
        "the re-run completes it.",
    )
    message = serializers.CharField(allow_null=True)
    requested_at = serializers.DateTimeField()
    requested_by = serializers.CharField()
    completed_at = serializers.DateTimeField(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField())
    operation_id = serializers.UUIDField(
        allow_null=True,
        help_text="The ERASURE operation on the namespace's chain: the first part of the "
        "receipt when it lists more redacted operations than one part holds "
        "(`RMS_ERASURE_RECEIPT_PAIRS`); the others follow it with the same `erasure_id`.",
    )
    task = serializers.UUIDField(allow_null=True)
