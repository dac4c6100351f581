"""A small simulated agent feeding the service through rms-client (start the server with
``make run`` first).

    RMS_TOKEN=<a client token of namespace support> python examples/agent_loop.py [--turns 50]

Only ``rms-client`` is needed (``pip install ./clients/python``), not the service. The token
comes from ``--token`` or ``RMS_TOKEN``: ``make run`` prints the demo tokens on its first run, and
``python manage.py create_api_client agent-loop-example --role client --namespace support``
prints a new one. The server is ``--url`` or ``RMS_URL``, else ``make run``'s
http://127.0.0.1:8000.

Each turn the agent ranks its memories for a question, injects the best three, "answers" with a
fake model that quotes one of them, lets the service detect what was used, and sometimes gets
a user's confirmation or correction. Nothing waits on the network: the recorder sends batches in
the background. The six memories have fixed ids, so running it again reuses them.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import uuid

from rms_client import RMSClient, RMSError

NAMESPACE = "support"
MEMORIES = [
    "Alice prefers Python for scripting",
    "Alice's team deploys on Tuesdays",
    "Bob is on call this week",
    "The staging database is PostgreSQL 16",
    "Invoices are sent on the first of the month",
    "The VPN needs a hardware key",
]
#: Each memory's id is derived from its text, so every run names the same six objects: the
#: first run creates them, the next ones read them back.
ID_SPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://rms.example/examples/agent_loop")
NO_TOKEN = """no API token: pass --token or set RMS_TOKEN.
A client token of namespace "support" comes from the first `make run` (it prints the demo
tokens), or from the service's checkout:
  .venv/bin/python manage.py create_api_client agent-loop-example --role client \\
      --namespace support"""


def memory_id(text: str) -> str:
    return str(uuid.uuid5(ID_SPACE, text))


def remembered(client: RMSClient) -> list[dict]:
    """The six memories, created on the first run and read back on the next ones."""
    found: dict[str, dict] = {}
    for text in MEMORIES:
        try:
            found[text] = client.get_object(memory_id(text))
        except RMSError as err:
            if err.status != 404:
                raise
    missing = [text for text in MEMORIES if text not in found]
    if missing:
        created = client.create_objects(
            [{"id": memory_id(text), "namespace": NAMESPACE, "content": text,
              "epistemic_type": "ASSERTED", "actor_id": "agent-loop-example",
              "actor_type": "AI_AGENT"} for text in missing]
        )  # fmt: skip
        found.update(zip(missing, created, strict=True))
    return [found[text] for text in MEMORIES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("RMS_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("RMS_TOKEN"))
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if not args.token:
        print(f"agent_loop: {NO_TOKEN}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except RMSError as err:
        if err.status is None and err.code in ("connection_error", "timeout"):
            print(
                f"agent_loop: cannot reach the RMS service at {args.url} ({err.message}).\n"
                "Start it with `make run`, or point the example at it with --url or RMS_URL.",
                file=sys.stderr,
            )
        elif err.status == 401:
            print(f"agent_loop: {args.url} refused the token ({err.message}).", file=sys.stderr)
        else:
            print(f"agent_loop: the service answered {err.status} {err.code}: {err.message}",
                  file=sys.stderr)  # fmt: skip
        return 2


def run(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]  # each run is a conversation of its own
    # Reachability and the token first, without retries: a wrong URL fails at once.
    with RMSClient(args.url, args.token, timeout=5.0, max_retries=0) as probe:
        probe.metrics(NAMESPACE)
    client = RMSClient(args.url, args.token, timeout=10.0, max_retries=5)
    memories = remembered(client)
    errors: list[RMSError] = []
    with client.recorder(
        flush_at=20, flush_interval=0.5, on_error=lambda b, e: errors.append(e)
    ) as rec:
        for turn in range(args.turns):
            question = rng.choice(MEMORIES).split(" ")[0] + "?"
            ranked = client.rank(NAMESPACE, [(m["id"], rng.random()) for m in memories])
            top = ranked[:3]
            used = next(m for m in memories if m["id"] == top[0]["object_id"])
            with rec.interaction(NAMESPACE, session_id=f"demo-{run_id}-{turn}", context_budget=600,
                                 context_text=question) as it:  # fmt: skip
                for rank, cand in enumerate(top, start=1):
                    it.injected(cand["object_id"], rank=rank, token_cost=40,
                                composite_score=cand["score"])  # fmt: skip
                it.response(f"As far as I know: {used['content']}.", detect=True)
                roll = rng.random()
                if roll < 0.2:
                    it.signal(used["id"], "CONFIRMED", actor_id="user-1", actor_type="HUMAN_USER")
                elif roll < 0.25:
                    it.signal(used["id"], "CORRECTED", actor_id="user-1", actor_type="HUMAN_USER")
                it.outcome("SUCCESS" if roll < 0.9 else "FAILED")
        rec.flush(timeout=30)
        print(f"recorder: {rec.stats}")
    for err in errors:
        print(f"refused: {err}")
    answer = client.metrics(NAMESPACE)
    window = answer["window"]
    print(f"metrics of {NAMESPACE}, sessions from {window['since']} to {window['until']}:")
    for name, metric in answer["metrics"].items():
        print(f"{name:>24}: {metric['value']!s:>22}  ({metric['state']})")
    best = max((client.get_object(m["id"]) for m in memories), key=lambda o: o["confidence"])
    print(f"most trusted memory now: {best['content']!r} (confidence {best['confidence']:.3f})")
    client.close()
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
