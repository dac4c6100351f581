"""The hot path's hand-spelled JSON (feedback.ingest) is canonical_json exactly (SPEC §6)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from feedback.planner import injection_payload_json
from rms.models import Operation
from rms.oplog import canonical_json, json_scalar
from tests.factories import make_objects, post, session

_numbers = st.none() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
_scalars = _numbers | st.booleans() | st.text()


@given(_scalars)
def test_json_scalar_is_canonical_json(value):
    assert json_scalar(value) == canonical_json(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_json_scalar_refuses_what_canonical_json_refuses(bad):
    with pytest.raises(ValueError):
        json_scalar(bad)


@given(
    texts=st.lists(st.text(), min_size=6, max_size=6),
    rank=st.none() | st.integers(min_value=1),
    cost=st.integers(min_value=0),
    composite=_numbers,
    str_value=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    utility=st.floats(min_value=0, max_value=1),
    uses=st.integers(min_value=0),
    last_use=st.none() | st.text(),
    version=st.integers(min_value=1),
)
def test_injection_payload_json_is_canonical_json(
    texts, rank, cost, composite, str_value, utility, uses, last_use, version
):
    session_id, request_id, session_pk, object_id, kind, ts = texts
    payload = {
        "session_id": session_id,
        "request_id": request_id,
        "feedback_session_id": session_pk,
        "object_id": object_id,
        "rank_position": rank,
        "representation_type": kind,
        "token_cost": cost,
        "composite_score": composite,
        "str_value": str_value,
        "injection_ts": ts,
        "utility": utility,
        "uses": uses,
        "last_use_at": last_use,
        "version": version,
    }
    assert injection_payload_json(payload) == canonical_json(payload)


@pytest.mark.django_db
def test_stored_injection_and_unused_payloads_are_what_was_hashed(client_api):
    """The payloads ingestion builds have exactly the spelled-out keys, and the automatic
    UNUSED events of one session, which share one encoded payload, each verify."""
    from rms.oplog import operation_hash

    ids = make_objects(client_api, 4)
    body = session("p1", [(oid, 10 + i) for i, oid in enumerate(ids)], [(ids[0], "CONFIRMED")])
    body["injections"][1]["composite_score"] = 1  # an int score, as a client may send it
    assert post(client_api, body).status_code == 201
    ops = Operation.objects.filter(op_type__in=["INJECTION_EVENT", "FEEDBACK_EVENT"])
    injections = [op for op in ops if op.op_type == "INJECTION_EVENT"]
    assert len(injections) == 4
    for op in injections:
        assert injection_payload_json(op.payload) == canonical_json(op.payload)
        assert op.hash == operation_hash(op)
    unused = [op for op in ops if op.payload.get("signal_type") == "UNUSED"]
    assert sorted(str(op.target_id) for op in unused) == sorted(ids[1:])
    assert all(op.hash == operation_hash(op) for op in unused)
