"""Erasure speed: erasing one actor who wrote ``--ops`` operations (target ≤ 5 s for 10,000).

In a fresh PostgreSQL database (``rms_bench_erasure``, dropped at the end): ``--objects``
objects, then feedback sessions through the API (the batch endpoint, Django's test client),
each injecting 10 objects with a signal of the actor on each, until the actor has written
``--ops`` operations (FEEDBACK_EVENT, REINFORCE/PENALTY); the namespace also holds the client's
own operations (OBJECT_CREATED, INJECTION_EVENT, FEEDBACK_SESSION), which the erasure must pass
over. Then it times ``erasure.services.run`` (the task's whole work: the rewrite of every table,
the OBJECT_ERASED and ERASURE operations, the commit) and checks the result: no operation left
with the actor's id, the chains verify (``verify_chain_all``, timed too) and the objects replay.

    .venv/bin/python bench/bench_erasure.py [--ops 10000] [--objects 200] [--keep] [--profile]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

DB = "rms_bench_erasure"
ACTOR = "alice-bench-actor"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
PER_SESSION = 10
BATCH = 100


def build(http, client, ns, args) -> int:
    from rms import services
    from rms.models import Operation

    rng = random.Random(7)
    items = [
        {"namespace": ns.name, "content": f"fact {i} about alice", "epistemic_type": "ASSERTED",
         "ts": EPOCH, "domain_tags": ["personal"]}
        for i in range(args.objects)
    ]  # fmt: skip
    ids = [str(o.pk) for o in services.object_create(client=client, items=items)]
    n = 0
    while Operation.objects.filter(actor_id=ACTOR).count() < args.ops:
        bodies = []
        for _ in range(BATCH):
            n += 1
            chosen = rng.sample(ids, PER_SESSION)
            bodies.append({
                "session_id": f"conv-{n}", "request_id": f"r-{n}",
                "namespace_scope": [ns.name], "context_budget": 4096, "tokens_used": 100,
                "ts": (EPOCH + timedelta(minutes=n)).isoformat(),
                "context_text": "what does alice prefer",
                "injections": [{"object_id": oid, "token_cost": 40, "rank_position": k + 1}
                               for k, oid in enumerate(chosen)],
                "signals": [{"object_id": oid, "signal_type": rng.choice(["CONFIRMED", "REFERENCED",
                             "CORRECTED"]), "actor_id": ACTOR, "actor_type": "HUMAN_USER"}
                            for oid in chosen],
            })  # fmt: skip
        resp = http.post("/api/v1/feedback-sessions/batch", bodies, content_type="application/json")
        assert resp.status_code == 207, resp.content[:300]
    return Operation.objects.filter(actor_id=ACTOR).count()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=10_000)
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--profile", action="store_true", help="cProfile the erasure (wall)")
    args = parser.parse_args()
    common.setup_database(DB)
    common.django_setup(DB)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from erasure import services as erasure
    from feedback.models import FeedbackSession
    from rms import verification
    from rms.api.auth import new_token, token_digest
    from rms.models import ApiClient, Namespace, Operation

    ns = Namespace.objects.create(name=common.BENCH_NAMESPACE)
    token = new_token()
    client = ApiClient.objects.create(
        user=get_user_model().objects.create(username="bench"), name="bench", role="admin",
        token_hash=token_digest(token),
    )  # fmt: skip
    http = Client(HTTP_AUTHORIZATION=f"Token {token}")
    t0 = time.perf_counter()
    actor_ops = build(http, client, ns, args)
    total = Operation.objects.count()
    print(f"# {actor_ops} operations by the actor, {total} in all, built in "
          f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    body = {"subject": {"kind": "actor", "id": ACTOR}, "namespace": ns.name}
    request = erasure.request(client=client, body=body)
    t0, c0 = time.perf_counter(), time.process_time()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.perf_counter)
        receipt = prof.runcall(erasure.run, request.pk)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        pstats.Stats(prof).print_callees("redact_operations")
    else:
        receipt = erasure.run(request.pk)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    left = Operation.objects.filter(actor_id=ACTOR).count()
    t1 = time.perf_counter()
    heads = FeedbackSession.objects.order_by("pk").values_list("pk", "head_hash")
    chain = verification.verify_chain_all(extra_heads=heads, extra_total=heads.count())
    verify_s = time.perf_counter() - t1
    replay = verification.verify_replay_all()
    common.print_table(
        ["what", "operations", "wall s", "CPU s (this process)"],
        [[f"erase actor ({receipt['counts']['operations']} redacted)", actor_ops, wall, cpu],
         ["verify_chain_all after", chain["operations"], verify_s, ""]],
    )  # fmt: skip
    ok = (
        receipt["state"] == "completed" and left == 0 and chain["ok"] and replay["ok"]
        and receipt["counts"]["operations"] >= args.ops
    )  # fmt: skip
    print(f"# counts {receipt['counts']}; chain ok {chain['ok']}, replay ok {replay['ok']}, "
          f"actor ops left {left}; target ≤ 5 s: {'met' if wall <= 5 else 'MISSED'}")  # fmt: skip
    from django.db import connection

    connection.close()
    if not args.keep:
        common.drop_database(DB)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
