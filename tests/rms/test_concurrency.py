"""Concurrent writers on PostgreSQL: row locks mean no lost update (SPEC §6)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from feedback import services as feedback_services
from rms.models import MemoryObject, Operation
from rms.verification import verify_object_chain, verify_object_replay
from tests.factories import make_object

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 8
PER_THREAD = 15


def test_many_threads_signalling_one_object_end_at_the_sequential_fold(
    require_postgres, client_api
):
    client = client_api.row
    obj = make_object(client, epistemic_type="INFERRED", confidence=0.3)
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(PER_THREAD):
                signal_type = ["CONFIRMED", "REFERENCED", "CORRECTED"][(n + i) % 3]
                feedback_services.signal_record(
                    client=client,
                    object_id=obj.pk,
                    data={
                        "signal_type": signal_type,
                        "session_id": f"s-{n}-{i}",
                        "actor_id": f"t{n}",
                    },
                    body_hash="-",
                )
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    obj = MemoryObject.objects.select_related("namespace").get(pk=obj.pk)
    sent = THREADS * PER_THREAD
    # Every signal wrote FEEDBACK_EVENT + REINFORCE/PENALTY: nothing was lost or overwritten.
    assert obj.version == 1 + 2 * sent
    assert Operation.objects.filter(target_id=obj.pk, op_type="FEEDBACK_EVENT").count() == sent
    # The row equals the sequential fold of its log in seq order, bit for bit.
    assert verify_object_replay(obj) == []
    assert verify_object_chain(obj) is None
    assert (
        obj.reinforcement_count
        == Operation.objects.filter(target_id=obj.pk, op_type="REINFORCE").count()
    )
