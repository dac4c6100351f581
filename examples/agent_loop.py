"""A small simulated agent feeding the service through rms-client (start the server with
``make run`` first).

    .venv/bin/python examples/agent_loop.py [--url URL] [--token TOKEN] [--turns 50]

URL and token come from the arguments, else ``RMS_URL`` / ``RMS_TOKEN``, else the defaults of
``make run``: http://127.0.0.1:8000 and, as ``make run`` prints tokens only once, a token for a
client ``agent-loop-example`` of namespace ``support`` made (or rotated) with
``manage.py create_api_client`` on the same database.

Each turn the agent ranks its memories for a question, injects the best three, "answers" with a
fake model that quotes one of them, lets the service detect what was used, and sometimes gets
a user's confirmation or correction. Nothing waits on the network: the recorder sends batches in
the background.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

from rms_client import RMSClient, RMSError

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "support"
MEMORIES = [
    "Alice prefers Python for scripting",
    "Alice's team deploys on Tuesdays",
    "Bob is on call this week",
    "The staging database is PostgreSQL 16",
    "Invoices are sent on the first of the month",
    "The VPN needs a hardware key",
]


def demo_token() -> str:
    """A token for the example's own client, made with the project's management command."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "create_api_client", "agent-loop-example",
         "--role", "client", "--namespace", NAMESPACE],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
        # the checkout `make run` serves: development unless the environment says otherwise
        env={"RMS_DEVELOPMENT": "true", **os.environ},
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("RMS_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("RMS_TOKEN"))
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    token = args.token or demo_token()
    rng = random.Random(args.seed)

    client = RMSClient(args.url, token, timeout=10.0, max_retries=5)
    memories = client.create_objects(
        [{"namespace": NAMESPACE, "content": text, "epistemic_type": "ASSERTED",
          "actor_id": "agent-loop-example", "actor_type": "AI_AGENT"} for text in MEMORIES]
    )  # fmt: skip
    errors: list[RMSError] = []
    with client.recorder(
        flush_at=20, flush_interval=0.5, on_error=lambda b, e: errors.append(e)
    ) as rec:
        for turn in range(args.turns):
            question = rng.choice(MEMORIES).split(" ")[0] + "?"
            ranked = client.rank(NAMESPACE, [(m["id"], rng.random()) for m in memories])
            top = ranked[:3]
            used = next(m for m in memories if m["id"] == top[0]["object_id"])
            with rec.interaction(NAMESPACE, session_id=f"demo-turn-{turn}", context_budget=600,
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
    metrics = client.metrics(NAMESPACE)["metrics"]
    for name, metric in metrics.items():
        print(f"{name:>24}: {metric['value']!s:>22}  ({metric['state']})")
    best = max((client.get_object(m["id"]) for m in memories), key=lambda o: o["confidence"])
    print(f"most trusted memory now: {best['content']!r} (confidence {best['confidence']:.3f})")
    client.close()
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
