"""RFC-0009 §13 explicit-feedback check: every explicit signal posted is recorded as explicit.

Sessions with explicit signals AND ``detect: true`` go through the ingestion engine on a scratch
PostgreSQL database; the check counts the explicit signals in the stored records (detection
method as sent, never marked ``detected``) against those posted. Prints the rate (must be 100 %).

    .venv/bin/python bench/bench_explicit.py [--sessions 2000]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_explicit"
EXPLICIT = ["CONFIRMED", "CORRECTED", "TASK_COMPLETED_WITH", "CONTRADICTED_BY_OBSERVATION"]


def main() -> None:
    common.stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    args = parser.parse_args()
    common.setup_database(DB)
    try:
        common.django_setup(DB)
        from feedback import ingest
        from feedback.api.fastpath import validate_session
        from rms import services
        from rms.models import ApiClient, Namespace

        token = common.create_api_client("bench-explicit", db=DB)
        del token
        client = ApiClient.objects.get(name="bench-explicit")
        ns = Namespace.objects.get(name=common.BENCH_NAMESPACE)
        objs = services.object_create(
            client=client,
            items=[
                {
                    "namespace": ns.name,
                    "content": f"fact {i}: service {i} uses port {8000 + i}",
                    "epistemic_type": "ASSERTED",
                }
                for i in range(500)
            ],
        )
        ids = [str(o.pk) for o in objs]
        rng = random.Random(11)
        posted = recorded = detected = 0
        items: list[ingest.Item] = []
        sent_by_request: dict[str, set] = {}
        for n in range(args.sessions):
            injected = rng.sample(ids, 8)
            explicit = [
                {
                    "object_id": oid,
                    "signal_type": rng.choice(EXPLICIT),
                    "detection_method": "explicit_user",
                    "actor_id": "user",
                    "actor_type": "HUMAN_USER",
                }
                for oid in injected[: rng.randint(0, 5)]
            ]
            mentioned = rng.sample(range(500), 4)
            body = {
                "session_id": f"c{n}",
                "request_id": f"r{n}",
                "namespace_scope": [ns.name],
                "context_budget": 4096,
                "tokens_used": 1000,
                "response_text": " ".join(f"service {i} uses port {8000 + i}." for i in mentioned),
                "detect": True,
                "injections": [{"object_id": o, "token_cost": 40} for o in injected],
                "signals": explicit,
            }
            sent_by_request[f"r{n}"] = {(s["object_id"], s["signal_type"]) for s in explicit}
            items.append(ingest.Item(validate_session(body), f"h{n}"))
            if len(items) == 500 or n == args.sessions - 1:
                for status, record in ingest.record_sessions(client=client, items=items):
                    assert status == 201, record
                    sent = sent_by_request[record["request_id"]]
                    got = {
                        (s["object_id"], s["signal_type"])
                        for s in record["signals"]
                        if s["detection_method"] == "explicit_user" and not s.get("detected")
                    }
                    posted += len(sent)
                    recorded += len(sent & got)
                    detected += sum(1 for s in record["signals"] if s.get("detected"))
                items = []
        rate = recorded / posted if posted else 1.0
        common.print_table(
            ["sessions", "explicit posted", "recorded as explicit", "rate", "detected (inferred)"],
            [[args.sessions, posted, recorded, f"{rate:.1%}", detected]],
        )
        if rate != 1.0:
            raise SystemExit("explicit-feedback check FAILED")
    finally:
        common.drop_database(DB)


if __name__ == "__main__":
    main()
