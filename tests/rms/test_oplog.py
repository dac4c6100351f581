"""The operation log (SPEC §6): hash chains, tamper detection, replay of random histories."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedback import services as feedback_services
from rms import policy, services
from rms.errors import DomainError
from rms.models import MemoryObject, Operation
from rms.oplog import canonical_json
from rms.verification import verify_object_chain, verify_object_replay
from tests.factories import make_object

pytestmark = pytest.mark.django_db

POSITIVE = ["REFERENCED", "CONFIRMED", "TASK_COMPLETED_WITH", "CORROBORATED_BY_EXTERNAL"]
NEGATIVE = ["CORRECTED", "CONTRADICTED_BY_OBSERVATION", "TASK_FAILED_WITH"]


def send(client, obj, **data):
    data = {"signal_type": "CONFIRMED", "session_id": "s-1", **data}
    return feedback_services.signal_record(
        client=client, object_id=obj.pk, data=data, body_hash="-"
    )


def random_history(client, obj, rng: random.Random, start: datetime, steps: int) -> None:
    ts = start
    for _ in range(steps):
        ts += timedelta(minutes=rng.randint(0, 600))
        roll = rng.random()
        try:
            if roll < 0.05:
                services.object_pin(
                    client=client,
                    object_id=obj.pk,
                    reason="r",
                    ts=ts,
                    confidence=rng.choice([None, 0.5]),
                )
            elif roll < 0.08:
                services.object_unpin(client=client, object_id=obj.pk, reason="r", ts=ts)
            elif roll < 0.10:
                services.object_transition(
                    client=client,
                    object_id=obj.pk,
                    ts=ts,
                    to=rng.choice(["ASSERTED", "OBSERVED", "DEPRECATED"]),
                    reason="r",
                )
            elif roll < 0.13:
                services.object_condition(
                    client=client,
                    object_id=obj.pk,
                    ts=ts,
                    condition_state=rng.choice(policy.CONDITION_STATES),
                )
            else:
                send(
                    client,
                    obj,
                    ts=ts,
                    signal_type=rng.choice(POSITIVE * 3 + NEGATIVE + ["UNUSED"]),
                    session_id=f"s-{rng.randint(0, 4)}",
                    actor_id=f"a-{rng.randint(0, 2)}",
                    actor_type=rng.choice(policy.ACTOR_TYPES),
                    detection_method=rng.choice(
                        [
                            None,
                            "explicit_user",
                            "response_analysis",
                            "implicit_behavioural",
                            "observation",
                        ]
                    ),
                    evidence_ids=rng.sample(["d1", "d2", "d3"], rng.randint(0, 2)),
                )
        except (DomainError, policy.PolicyError):
            pass  # a refused change (e.g. unpin while unpinned) writes nothing; the history goes on


def test_replay_of_100_random_objects_is_bit_identical(admin_api):
    client = admin_api.row
    rng = random.Random(8)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    types = ["OBSERVED", "ASSERTED", "INFERRED", "HYPOTHETICAL", "CONDITIONAL", "UNVERIFIED"]
    objects = [
        make_object(client, epistemic_type=rng.choice(types), ts=start, evidence_ids=["d1"])
        for _ in range(100)
    ]
    for obj in objects:
        random_history(client, obj, rng, start, rng.randint(5, 25))
    total_ops = 0
    for obj in MemoryObject.objects.select_related("namespace"):
        assert verify_object_replay(obj) == [], obj.pk
        assert verify_object_chain(obj) is None
        total_ops += obj.version
    assert total_ops == Operation.objects.count() > 1000


def test_stored_state_after_each_operation_matches_the_row(client_api):
    obj = make_object(client_api.row)
    send(client_api.row, obj)
    obj.refresh_from_db()
    last = Operation.objects.filter(target_id=obj.pk).order_by("-seq").first()
    assert last.state["confidence"] == obj.confidence and last.state["version"] == obj.version == 3


def test_hash_is_sha256_of_prev_hash_and_canonical_row(client_api):
    import hashlib

    from rms.oplog import row_for_hash

    obj = make_object(client_api.row)
    op = Operation.objects.get(target_id=obj.pk)
    row = row_for_hash(op)
    assert set(row) == {
        "id",
        "ts",
        "op_type",
        "target_type",
        "target_id",
        "namespace",
        "actor_id",
        "actor_type",
        "session_id",
        "payload",
        "policy_version",
        "state",
        "prev_hash",
    }
    assert op.prev_hash == "0" * 64
    assert op.hash == hashlib.sha256((op.prev_hash + canonical_json(row)).encode()).hexdigest()
    assert row["ts"].endswith("+00:00") and len(row["ts"].split(".")[1]) == 6 + 6


def _chain(client):
    obj = make_object(client)
    for i in range(4):
        send(client, obj, session_id=f"s{i}")
    obj.refresh_from_db()
    return obj, list(Operation.objects.filter(target_id=obj.pk).order_by("seq"))


def test_changed_payload_is_detected(client_api):
    obj, ops = _chain(client_api.row)
    target = ops[4]
    Operation.objects.filter(seq=target.seq).update(
        payload={**target.payload, "confidence_after": 0.99}
    )
    broken = verify_object_chain(obj)
    assert broken["seq"] == target.seq and "hash" in broken["reason"]


def test_changed_stored_state_is_detected_by_chain_and_replay(client_api):
    obj, ops = _chain(client_api.row)
    target = ops[2]
    Operation.objects.filter(seq=target.seq).update(state={**target.state, "confidence": 0.5})
    assert verify_object_chain(obj)["seq"] == target.seq
    assert [m["seq"] for m in verify_object_replay(obj)] == [target.seq]


def test_removed_operation_is_detected(client_api):
    obj, ops = _chain(client_api.row)
    Operation.objects.filter(seq=ops[3].seq).delete()
    assert verify_object_chain(obj)["seq"] == ops[4].seq


def test_truncated_chain_is_detected(client_api):
    obj, ops = _chain(client_api.row)
    Operation.objects.filter(seq=ops[-1].seq).delete()
    broken = verify_object_chain(obj)
    assert broken is not None and "head hash" in broken["reason"]


def test_intact_chain_verifies(client_api):
    obj, _ = _chain(client_api.row)
    assert verify_object_chain(obj) is None and verify_object_replay(obj) == []


def test_event_time_never_goes_backwards_on_a_chain(client_api):
    obj = make_object(client_api.row, ts=datetime(2026, 2, 1, tzinfo=UTC))
    send(client_api.row, obj, ts=datetime(2026, 2, 3, tzinfo=UTC))
    with pytest.raises(DomainError) as err:
        send(client_api.row, obj, ts=datetime(2026, 2, 2, tzinfo=UTC))
    assert err.value.code == "ts_out_of_order" and err.value.status == 409
    send(client_api.row, obj)  # omitted ts: max(now, latest)
    ts = list(
        Operation.objects.filter(target_id=obj.pk).order_by("seq").values_list("ts", flat=True)
    )
    assert ts == sorted(ts)


def test_omitted_ts_after_a_future_dated_chain_is_the_latest(client_api, settings):
    """An omitted ts is max(now, latest ts), so the chain never goes backwards (SPEC §6)."""
    import time_machine

    obj = make_object(client_api.row)
    with time_machine.travel(datetime(2099, 1, 1, tzinfo=UTC), tick=False):
        send(client_api.row, obj)
    send(client_api.row, obj, session_id="s-2")
    ops = list(Operation.objects.filter(target_id=obj.pk).order_by("seq"))
    assert ops[-1].ts == datetime(2099, 1, 1, tzinfo=UTC)


def test_hash_template_equals_canonical_json_of_the_row(client_api):
    """oplog.append spells the canonical row out by hand for speed; it must be the same text."""
    from rms.oplog import operation_hash

    obj = make_object(client_api.row, evidence_ids=["é", 'q"uote'], content="naïve \u2028 text")
    send(client_api.row, obj, actor_id="ünï", evidence_ids=["x"])
    for op in Operation.objects.filter(target_id=obj.pk):
        assert operation_hash(op) == op.hash


def test_new_id_is_the_text_of_a_version_4_uuid():
    import uuid

    from rms.oplog import new_id

    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        u = uuid.UUID(text)
        assert str(u) == text
        assert u.version == 4 and u.variant == uuid.RFC_4122


def test_new_id_pools_are_per_thread_and_forgotten_in_a_forked_child():
    import os
    import threading

    from rms.oplog import new_id

    new_id()  # this thread's pool is filled
    per_thread: list[list[str]] = [[], []]

    def take(k: int) -> None:
        per_thread[k] += [new_id() for _ in range(600)]  # crosses a block boundary

    threads = [threading.Thread(target=take, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mine = [new_id() for _ in range(300)]
    everything = per_thread[0] + per_thread[1] + mine
    assert len(set(everything)) == len(everything)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id must not be the parent's next one
        os.close(read)
        os.write(write, new_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 36 and child != new_id()


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_json_values)
def test_canonical_json_is_json_dumps_with_the_spec_arguments(value):
    """SPEC §6 defines the hashed text as json.dumps(...); the cached C encoder must agree."""
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), allow_nan=False
    )


def test_canonical_json_refuses_what_json_dumps_refuses():
    for bad in (float("nan"), {"a": float("inf")}):
        with pytest.raises(ValueError):
            canonical_json(bad)
    with pytest.raises(TypeError):
        canonical_json({"a": object()})


@given(
    strings=st.lists(st.text(), min_size=7, max_size=7),
    session_id=st.none() | st.text(),
    payload=_json_values,
    state=st.none() | st.dictionaries(st.text(), _json_scalars, max_size=4),
)
def test_row_json_is_canonical_json_of_the_hashed_row(strings, session_id, payload, state):
    """The hand-spelled row (any text in the string fields) is canonical_json of the row."""
    import uuid

    from rms.oplog import _row_json, new_id

    actor_id, actor_type, namespace, op_type, policy_version, prev_hash, target_type = strings
    op_id, target_id, ts = new_id(), str(uuid.uuid4()), "2026-11-30T15:00:00.123456+00:00"
    row = {
        "id": op_id,
        "ts": ts,
        "op_type": op_type,
        "target_type": target_type,
        "target_id": target_id,
        "namespace": namespace,
        "actor_id": actor_id,
        "actor_type": actor_type,
        "session_id": session_id,
        "payload": payload,
        "policy_version": policy_version,
        "state": state,
        "prev_hash": prev_hash,
    }
    spelled = _row_json(
        actor_id,
        actor_type,
        op_id,
        namespace,
        op_type,
        canonical_json(payload),
        policy_version,
        prev_hash,
        session_id,
        canonical_json(state),
        canonical_json(target_id),
        target_type,
        ts,
    )
    assert spelled == canonical_json(row)
