"""OTLP tests: the real OpenTelemetry SDK and OTLP/HTTP exporter against a live server of this
project (pytest-django's ``live_server``, real HTTP). Spans are made by the SDK, collected in its
in-memory exporter, then sent by the real ``OTLPSpanExporter`` in the groups a test chooses, so a
trace split over several exports is deterministic."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rms.models import ApiClient
from tests.factories import make_client, make_namespace, make_object

PATH = "/api/v1/otlp/v1/traces"
TEXTS = [
    "Alice prefers Python for scripting",
    "Bob deploys with Kubernetes on Fridays",
    "The Lisbon office closes at six",
]


def tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


@dataclass
class Env:
    url: str
    client: str  # a client of "support" only
    multi: str  # a client of "support" and "billing"
    operator: str
    ids: list[str]  # objects of "support", one per TEXTS
    other_id: str  # an object of "billing"

    @property
    def endpoint(self) -> str:
        return self.url + PATH

    def exporter(self, token: str | None = None, **options) -> OTLPSpanExporter:
        return OTLPSpanExporter(
            endpoint=self.endpoint,
            headers={"Authorization": f"Token {token or self.client}"},
            timeout=10,
            **options,
        )

    def metric(self, name: str, **labels) -> float:
        """A counter's value read from ``GET /metrics`` (0 when absent)."""
        text = httpx.get(
            self.url + "/metrics", headers={"Authorization": f"Token {self.operator}"}
        ).text
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        key = f"{name}_total{{{want}}}" if want else f"{name}_total"
        for line in text.splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return 0.0


@pytest.fixture
def env(live_server, transactional_db) -> Env:
    make_namespace("support")
    make_namespace("billing")
    client_row, client = make_client("client-1", "client", ["support"])
    _, multi = make_client("multi-1", "client", ["support", "billing"])
    _, operator = make_client("operator-1", "operator")
    owner = ApiClient.objects.get(name="client-1")
    ids = [str(make_object(owner, content=text).pk) for text in TEXTS]
    other = make_object(ApiClient.objects.get(name="multi-1"), "billing", content="Billing fact")
    return Env(live_server.url, client, multi, operator, ids, str(other.pk))


class Spans:
    """An SDK TracerProvider whose finished spans are collected, to be exported later."""

    def __init__(self, **resource: str) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create(resource))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("tests.otlp")

    def finished(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def export(exporter: OTLPSpanExporter, spans: Sequence[ReadableSpan]) -> None:
    assert exporter.export(list(spans)) == SpanExportResult.SUCCESS


GZIP = Compression.Gzip
