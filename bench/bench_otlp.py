"""OTLP ingestion beside the batch endpoint, in one run on one PostgreSQL database.

The same sessions (10 injections with scores, 3 explicit signals, no response) are sent twice,
over fresh objects each time:

1. as JSON bodies to ``POST /feedback-sessions/batch``, 500 a request;
2. as OTLP protobuf to ``POST /otlp/v1/traces``: one trace a session (a root span, a retriever
   span with the 10 documents, a span with the 3 ``rms.signal.*`` attributes), sent in exports
   of 512 spans (so traces are split across exports), then assembled into sessions by the flush
   beat runs (``otlp.services.traces_flush``, called here in-process until nothing is due).

Sessions/s of each path is sessions / wall time, the OTLP one including the assembly; the
latencies of the 512-span exports are reported too (p50/p95/p99).

    .venv/bin/python bench/bench_otlp.py [--sessions 3000] [--objects 3000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_otlp"
INJECTIONS, SIGNALS = 10, 3
SPANS_PER_EXPORT = 512
PATH = "/api/v1/otlp/v1/traces"


def create_objects(api: common.Api, n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        items = [
            {"namespace": common.BENCH_NAMESPACE, "content": f"bench fact {start + i}",
             "epistemic_type": "ASSERTED"}
            for i in range(min(1000, n - start))
        ]  # fmt: skip
        status, body = api.request("POST", "/api/v1/objects", items)
        if status != 201:
            raise RuntimeError(f"objects: {status} {body}")
        ids.extend(o["id"] for o in body)
    return ids


def plans(rng: random.Random, ids: list[str], n: int) -> list[dict]:
    """The sessions, as plain plans both paths encode."""
    out = []
    for _ in range(n):
        injected = rng.sample(ids, INJECTIONS)
        out.append(
            {
                "session_id": f"conv-{rng.randint(0, 10_000)}",
                "docs": [(oid, round(rng.random(), 3)) for oid in injected],
                "signals": [
                    (oid, rng.choice(["CONFIRMED", "CORRECTED", "TASK_COMPLETED_WITH"]))
                    for oid in rng.sample(injected, SIGNALS)
                ],
            }
        )
    return out


def batch_body(plan: dict) -> dict:
    return {
        "session_id": plan["session_id"],
        "request_id": str(uuid.uuid4()),
        "namespace_scope": [common.BENCH_NAMESPACE],
        "context_budget": 4096,
        "tokens_used": 10 * INJECTIONS,
        "injections": [
            {"object_id": oid, "rank_position": r, "token_cost": 10, "composite_score": score}
            for r, (oid, score) in enumerate(plan["docs"], 1)
        ],
        "signals": [{"object_id": oid, "signal_type": t} for oid, t in plan["signals"]],
    }


def trace_spans(plan: dict, start_ns: int) -> list:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    trace_id = os.urandom(16)
    root_id = os.urandom(8)

    def span(name: str, parent: bytes, offset: int, attrs: dict) -> Span:
        s = Span(
            trace_id=trace_id,
            span_id=root_id if not parent else os.urandom(8),
            parent_span_id=parent,
            name=name,
            start_time_unix_nano=start_ns + offset,
            end_time_unix_nano=start_ns + offset + 1000,
        )
        for key, value in attrs.items():
            kv = s.attributes.add()
            kv.key = key
            if isinstance(value, float):
                kv.value.double_value = value
            else:
                kv.value.string_value = value
        return s

    docs: dict = {"openinference.span.kind": "RETRIEVER", "input.value": "a question"}
    for i, (oid, score) in enumerate(plan["docs"]):
        docs[f"retrieval.documents.{i}.document.id"] = oid
        docs[f"retrieval.documents.{i}.document.score"] = score
        docs[f"retrieval.documents.{i}.document.content"] = "x" * 40  # 10 tokens
    signals = {f"rms.signal.{oid}": t for oid, t in plan["signals"]}
    return [
        span("retrieve", root_id, 10, docs),
        span("feedback", root_id, 20, signals),
        span("agent", b"", 0, {"session.id": plan["session_id"]}),  # the root ends last
    ]


def exports(plans_: list[dict]) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans = []
    t0 = time.time_ns()
    for k, plan in enumerate(plans_):
        spans.extend(trace_spans(plan, t0 + k * 10_000))
    bodies = []
    for start in range(0, len(spans), SPANS_PER_EXPORT):
        message = ExportTraceServiceRequest()
        rs = message.resource_spans.add()
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", "bench-agent"
        rs.scope_spans.add().spans.extend(spans[start : start + SPANS_PER_EXPORT])
        bodies.append(message.SerializeToString())
    return bodies


def run_batch(port: int, token: str, bodies: list[dict]) -> float:
    import json

    api = common.Api(port, token, timeout=300)
    encoded = [json.dumps(bodies[i : i + 500]).encode() for i in range(0, len(bodies), 500)]
    t0 = time.perf_counter()
    for data in encoded:
        status, answer = api.request("POST", "/api/v1/feedback-sessions/batch", data)
        if status != 207 or any(r["status"] != 201 for r in answer["results"]):
            raise RuntimeError(f"batch: {status} {str(answer)[:300]}")
    wall = time.perf_counter() - t0
    api.close()
    return wall


def run_otlp(port: int, token: str, bodies: list[bytes]) -> tuple[float, list[float], float]:
    import http.client

    from otlp import services

    conn = http.client.HTTPConnection(common.HOST, port, timeout=120)
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Token {token}"}
    latencies = []
    t0 = time.perf_counter()
    for data in bodies:
        t = time.perf_counter()
        conn.request("POST", PATH, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        latencies.append(time.perf_counter() - t)
        if resp.status != 200 or raw:  # a full success is an empty response message
            raise RuntimeError(f"otlp export: {resp.status} {raw[:300]!r}")
    exported = time.perf_counter() - t0
    conn.close()
    t1 = time.perf_counter()
    while services.traces_flush():
        pass
    assembled = time.perf_counter() - t1
    return exported, latencies, assembled


def main() -> None:
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--objects", type=int, default=3000)
    args = parser.parse_args()
    common.setup_database(DB)
    try:
        token = common.create_api_client("bench-otlp", db=DB)
        common.django_setup(DB)
        rng = random.Random(7)
        with common.Server(db=DB, workers=2, threads=4) as server:
            api = common.Api(server.port, token, timeout=120)
            ids_batch = create_objects(api, args.objects)
            ids_otlp = create_objects(api, args.objects)
            api.close()
            warm = plans(rng, ids_batch, 500)
            run_batch(server.port, token, [batch_body(p) for p in warm])
            run_otlp(server.port, token, exports(plans(rng, ids_otlp, 200)))
            same = plans(rng, list(range(args.objects)), args.sessions)  # indexes into the ids

            def on(ids):
                return [
                    {**p, "docs": [(ids[i], s) for i, s in p["docs"]],
                     "signals": [(ids[i], t) for i, t in p["signals"]]}
                    for p in same
                ]  # fmt: skip

            batch_wall = run_batch(server.port, token, [batch_body(p) for p in on(ids_batch)])
            bodies = exports(on(ids_otlp))
            exported, latencies, assembled = run_otlp(server.port, token, bodies)
        from feedback.models import FeedbackSession

        stored = FeedbackSession.objects.count()
        expected = 500 + 200 + 2 * args.sessions
        if stored != expected:
            raise RuntimeError(f"{stored} sessions stored, expected {expected}")
        n = args.sessions
        otlp_wall = exported + assembled
        pct = common.percentiles([x * 1000 for x in latencies])
        rows = [
            ["batch of 500 (JSON)", n, f"{n / batch_wall:.0f}", f"{batch_wall:.2f} s", "-"],
            [
                f"OTLP protobuf, exports of {SPANS_PER_EXPORT} spans + assembly",
                n,
                f"{n / otlp_wall:.0f}",
                f"{exported:.2f} s export + {assembled:.2f} s assembly",
                f"{pct[50]:.0f} / {pct[95]:.0f} / {pct[99]:.0f}",
            ],
        ]
        common.print_table(
            ["path", "sessions", "sessions/s", "wall", "export ms p50/p95/p99"], rows
        )
        print(
            f"OTLP / batch sessions/s = {(n / otlp_wall) / (n / batch_wall):.0%} (target ≥ 70%); "
            f"p95 of a {SPANS_PER_EXPORT}-span export = {pct[95]:.0f} ms (target ≤ 250 ms); "
            f"{len(bodies)} exports"
        )
    finally:
        from django.db import connections

        connections.close_all()
        common.drop_database(DB)


if __name__ == "__main__":
    main()
