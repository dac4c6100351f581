"""SPEC §14: the benchmark suite's replay of 100 objects, written through the live services into
a sandbox namespace and replayed from the stored log through rms.replay."""

from __future__ import annotations

import json
import random

import pytest
from django.contrib.auth import get_user_model

from feedback import suite
from feedback.models import FeedbackAggregate, FeedbackSession, SignalRecord
from rms import policy
from rms.models import ApiClient, MemoryObject, Namespace, Operation

pytestmark = pytest.mark.django_db

#: Every operation type that changes or records an object's state, so "identical" covers them.
OBJECT_OP_TYPES = {
    "OBJECT_CREATED", "INJECTION_EVENT", "FEEDBACK_EVENT", "REINFORCE", "PENALTY",
    "IGNORED_CHECK", "PIN", "UNPIN", "EPISTEMIC_TRANSITION", "CONDITION_CHANGED",
}  # fmt: skip


def table_counts() -> dict:
    models = (
        Namespace, ApiClient, get_user_model(), MemoryObject, Operation, FeedbackSession,
        SignalRecord, FeedbackAggregate,
    )  # fmt: skip
    return {model.__name__: model.objects.count() for model in models}


@pytest.fixture
def result():
    return suite.benchmark_suite()


def test_the_suite_passes_every_check_on_the_default_seed(result):
    assert result["passed"] is True
    assert [check["name"] for check in result["checks"]] == [
        "asymptote",
        "session_cap",
        "independence_discount",
        "corrected_floor",
        "replay",
    ]
    replay = result["checks"][-1]["measured"]
    assert replay["objects"] == 100
    assert replay["mismatches"] == 0 and replay["mismatch_list"] == []
    assert replay["refused"] == []
    json.dumps(result, allow_nan=False)


def test_the_histories_go_through_every_write_path(result):
    replay = result["checks"][-1]["measured"]
    assert set(replay["operation_types"]) == OBJECT_OP_TYPES
    assert sum(replay["operation_types"].values()) == replay["operations"] > 2500
    # single and batch sessions answer 201, identical retries 200, signals alone 201
    assert {key.split(":")[0] for key in replay["answers"]} == {
        "session", "batch", "retry", "signal",
    }  # fmt: skip
    assert all(key.endswith(":200") == key.startswith("retry") for key in replay["answers"])
    assert replay["writes"]["sweep_penalized"] > 0


def test_the_sandbox_leaves_nothing_behind():
    before = table_counts()
    suite.check_replay(7, objects=10, steps=30)
    assert table_counts() == before
    assert not Namespace.objects.filter(name__startswith=suite.SANDBOX_PREFIX).exists()


def test_the_same_seed_gives_the_same_result_and_another_seed_another():
    first = suite.check_replay(3, objects=20, steps=60)
    assert suite.check_replay(3, objects=20, steps=60) == first
    assert suite.check_replay(4, objects=20, steps=60)["measured"] != first["measured"]


def test_progress_rises_to_one():
    seen: list[float] = []
    suite.benchmark_suite(5, progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert len(seen) > 100


def _sandbox(seed: int = 11):
    return suite.build_sandbox(random.Random(seed), objects=20, steps=80)


def _chain(object_id) -> list[Operation]:
    return list(Operation.objects.filter(target_id=object_id).order_by("ts", "seq"))


def _reinforce_that_moved(sandbox) -> tuple[int, int, Operation]:
    """(object number, position in its chain, op) of a REINFORCE whose γ was applied whole,
    so another reliability discount gives another confidence."""
    for number, object_id in enumerate(sandbox.object_ids):
        for position, op in enumerate(_chain(object_id), 1):
            p = op.payload
            if (
                op.op_type == "REINFORCE"
                and p["gamma_effective"] > 0
                and not (p["cap_applied"] or p["ceiling_applied"])
            ):
                return number, position, op
    raise AssertionError("no REINFORCE to alter")


def test_the_check_fails_when_one_stored_payload_is_altered():
    sandbox = _sandbox()
    assert suite.replay_sandbox(sandbox)["passed"] is True
    number, position, op = _reinforce_that_moved(sandbox)
    method = op.payload["detection_method"]
    other = "explicit_user" if policy.DETECTION_METHODS[method][1] != 1.0 else "response_analysis"
    Operation.objects.filter(seq=op.seq).update(payload={**op.payload, "detection_method": other})

    check = suite.replay_sandbox(sandbox)
    assert check["passed"] is False
    assert check["measured"]["mismatches"] == 1
    first = check["measured"]["mismatch_list"][0]
    assert first == {
        "object": number, "position": position, "op_type": "REINFORCE", "where": "stored state",
    }  # fmt: skip
    assert {m["object"] for m in check["measured"]["mismatch_list"]} == {number}


def test_a_payload_the_fold_cannot_read_is_a_mismatch_not_a_crash():
    sandbox = _sandbox()
    number, position, op = _reinforce_that_moved(sandbox)
    payload = {k: v for k, v in op.payload.items() if k != "signal_type"}
    Operation.objects.filter(seq=op.seq).update(payload=payload)

    check = suite.replay_sandbox(sandbox)
    assert check["passed"] is False
    assert check["measured"]["mismatches"] == 1
    (only,) = check["measured"]["mismatch_list"]
    assert (only["object"], only["position"], only["where"]) == (number, position, "replay")
    assert only["reason"] == "KeyError: 'signal_type'"


def test_a_changed_object_row_is_a_mismatch():
    sandbox = _sandbox()
    target = sandbox.object_ids[3]
    row = MemoryObject.objects.get(pk=target)
    # one unit in the last place: equal to 15 digits, different bits
    MemoryObject.objects.filter(pk=target).update(
        salience_base=row.salience_base + row.salience_base * 2**-52
    )
    check = suite.replay_sandbox(sandbox)
    assert check["measured"]["mismatch_list"] == [
        {"object": 3, "position": None, "where": "object row"}
    ]
