"""Relationship API (API.md relationships and graph; SPEC §13)."""

from __future__ import annotations

import math
import uuid

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from rms import edges, evidence
from rms.api import openapi
from rms.api.base import APIView
from rms.api.inputs import validated
from rms.api.params import namespace_param, parse_time_param, parse_uuid
from rms.api.permissions import ANY_ROLE, WRITERS
from rms.api.serializers import (
    FiniteFloatField,
    StrictCharField,
    StrictDateTimeField,
    StrictSerializer,
    StrictUUIDField,
    choice,
)
from rms.selectors import visible_object
from rms.services import Actor

MAX_SEEDS = 100
SEED_PATTERN = r"^[0-9a-fA-F-]{32,36}:[0-9]+(\.[0-9]+)?$"


class RelationshipIn(StrictSerializer):
    source = StrictUUIDField()
    target = StrictUUIDField()
    relation = StrictCharField(max_length=100)
    extraction_context = choice(evidence.EXTRACTION_CONTEXTS)
    actor_id = StrictCharField(max_length=200, required=False)
    ts = StrictDateTimeField(required=False)


class EvidenceIn(StrictSerializer):
    kind = choice(evidence.EVIDENCE_KINDS)
    provenance = choice(evidence.PROVENANCES, required=False, allow_null=True)
    actor_id = StrictCharField(max_length=200, required=False)
    ts = StrictDateTimeField(required=False)


def _actor(request, data):
    return Actor.of(request.auth, data.pop("actor_id", None))


class RelationshipListView(APIView):
    roles = {"POST": WRITERS}

    @extend_schema(
        request=RelationshipIn, responses={201: openapi.RelationshipOut, 409: openapi.CONFLICT}
    )
    def post(self, request):
        data = validated(RelationshipIn, request.data)
        actor = _actor(request, data)
        rel = edges.relationship_create(client=request.auth, actor=actor, **data)
        return Response(edges.relationship_out(rel, timezone.now()), status=201)


class RelationshipDetailView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="relationships_detail",
        parameters=[openapi.time_param("as_of", "Replay the posterior to this time.")],
        responses={200: openapi.RelationshipOut},
        description="The posterior now, or as of `as_of` (effective confidence at T).",
    )
    def get(self, request, relationship_id: str):
        rel = edges.visible_relationship(request.auth, parse_uuid(relationship_id))
        as_of = parse_time_param(request, "as_of")
        if as_of is not None:
            return Response(edges.relationship_as_of(rel, as_of))
        return Response(edges.relationship_out(rel, timezone.now()))


class RelationshipEvidenceView(APIView):
    roles = {"POST": WRITERS}

    @extend_schema(
        request=EvidenceIn, responses={200: openapi.RelationshipOut, 409: openapi.CONFLICT}
    )
    def post(self, request, relationship_id: str):
        rel_id = parse_uuid(relationship_id)
        data = validated(EvidenceIn, request.data)
        actor = _actor(request, data)
        rel = edges.relationship_evidence(
            client=request.auth, relationship_id=rel_id, actor=actor, **data
        )
        return Response(edges.relationship_out(rel, timezone.now()))


def seed_scores(pairs: list[tuple[uuid.UUID, float]]) -> dict[uuid.UUID, float]:
    """Seeds as {object id: score}; a seed given twice keeps its higher score."""
    seeds: dict[uuid.UUID, float] = {}
    for key, value in pairs:
        seeds[key] = max(value, seeds.get(key, 0.0))
    return seeds


def parse_seeds(request) -> dict[uuid.UUID, float]:
    raw = request.query_params.getlist("seed")
    if not raw:
        raise ValidationError({"seed": ["Give at least one seed=<object id>:<score>."]})
    if len(raw) > MAX_SEEDS:
        raise ValidationError({"seed": [f"At most {MAX_SEEDS} seeds (POST them for a body)."]})
    pairs = []
    for item in raw:
        object_id, sep, score = item.rpartition(":")
        try:
            value = float(score)
            key = uuid.UUID(object_id)
        except ValueError:
            value, key = math.nan, None
        if not sep or key is None or not math.isfinite(value) or value < 0:
            raise ValidationError({"seed": [f"Malformed seed {item!r}: use <uuid>:<score ≥ 0>."]})
        pairs.append((key, value))
    return seed_scores(pairs)


class SeedIn(StrictSerializer):
    object_id = StrictUUIDField()
    score = FiniteFloatField(min_value=0)


class ExpandIn(StrictSerializer):
    """The seeds in a body: a 100-seed query string is longer than some proxies take."""

    seeds = SeedIn(many=True, allow_empty=False, max_length=MAX_SEEDS)


class GraphExpandView(APIView):
    roles = {"GET": ANY_ROLE, "POST": ANY_ROLE}

    @extend_schema(
        operation_id="graph_expand",
        parameters=[
            openapi.query(
                "seed",
                description="`<object id>:<score ≥ 0>`, repeated (1..100).",
                required=True,
                many=True,
                explode=True,
                pattern=SEED_PATTERN,
            )
        ],
        responses={200: openapi.ExpansionList},
    )
    def get(self, request):
        """One hop both ways; neighbour score = seed score × effective confidence (≥ 0.1)."""
        results = edges.expand(request.auth, parse_seeds(request), timezone.now())
        return Response({"results": results})

    @extend_schema(
        operation_id="graph_expand_post",
        request=ExpandIn,
        responses={200: openapi.ExpansionList},
        description="The same expansion as GET, with up to 100 seeds in the body.",
    )
    def post(self, request):
        data = validated(ExpandIn, request.data)
        seeds = seed_scores([(s["object_id"], s["score"]) for s in data["seeds"]])
        return Response({"results": edges.expand(request.auth, seeds, timezone.now())})


class CalibrationView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(
        operation_id="calibration",
        parameters=[openapi.NAMESPACE],
        responses={200: openapi.CalibrationOut},
    )
    def get(self, request):
        """Per extraction context: prior mean against the share of user/external evidence
        that corroborated."""
        ns = namespace_param(request)
        return Response({"namespace": ns.name, "results": edges.calibration(ns)})


class ObjectRelationshipsView(APIView):
    roles = {"GET": ANY_ROLE}

    @extend_schema(operation_id="objects_relationships", responses={200: openapi.RelationshipList})
    def get(self, request, object_id: str):
        obj = visible_object(request.auth, parse_uuid(object_id))
        return Response({"results": edges.object_relationships(obj, timezone.now()), "next": None})
