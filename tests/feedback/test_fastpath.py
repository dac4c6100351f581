"""The fast session validator agrees with SessionIn: same data, never more permissive."""

from __future__ import annotations

import json
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from feedback.api.fastpath import validate_session
from feedback.api.serializers import SessionIn


def plain(value):
    return json.loads(json.dumps(value, default=str))


texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["s-1", " padded ", "", "   ", "a\x00b"]),
    st.integers(),
    st.none(),
)
ids = st.one_of(
    st.uuids().map(str),
    st.sampled_from(["nope", "", str(uuid.uuid4()).upper()]),
    st.integers(),
    st.uuids().map(lambda u: u.hex),
)
ints = st.one_of(st.integers(-3, 5000), st.sampled_from([2**31, 2**31 - 1, 1.0, 2.5, True, "7"]))
numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.none(),
    st.sampled_from(["0.5", True]),
)
maybe = lambda s: st.one_of(st.just(None), s)  # noqa: E731


def optional(d: dict, extra: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(d, optional=extra)


injection = optional(
    {"object_id": ids, "token_cost": ints},
    {
        "rank_position": st.one_of(ints, st.none()),
        "representation_type": texts,
        "composite_score": numbers,
        "str_value": numbers,
        "colour": st.just("red"),
    },
)
signal = optional(
    {
        "object_id": ids,
        "signal_type": st.sampled_from(["CONFIRMED", "UNUSED", "LIKED", "CORRECTED"]),
    },
    {
        "detection_method": st.sampled_from(["explicit_user", "telepathy", None]),
        "actor_id": texts,
        "actor_type": st.sampled_from(["AI_AGENT", "ROBOT"]),
        "evidence_ids": st.one_of(st.lists(texts, max_size=3), texts),
    },
)
bodies = optional(
    {
        "session_id": texts,
        "request_id": texts,
        "namespace_scope": st.one_of(
            st.lists(st.sampled_from(["support", "billing", "", 3]), max_size=3), texts
        ),
        "context_budget": ints,
        "tokens_used": ints,
    },
    {
        "context_text": texts,
        "context_tags": st.one_of(st.lists(texts, max_size=3), texts),
        "outcome": st.sampled_from(["SUCCESS", "FAILED", "GREAT", None]),
        "ts": st.sampled_from(
            [
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00",
                "soon",
                5,
                "2026-01-01T00:00:00+15:59",
                "2026-01-01T00:00:00+16:00",
                "9999-12-31T23:00:00-05:00",
            ]
        ),
        "detect": st.sampled_from([True, False, "true", 1, 0, None]),
        "response_text": st.sampled_from(["", "It was Python.", 3]),
        "injections": st.one_of(st.lists(injection, max_size=3), texts),
        "signals": st.one_of(st.lists(signal, max_size=3), texts),
        "surprise": st.just(1),
    },
)


@settings(max_examples=600, deadline=None)
@given(bodies)
def test_fast_path_agrees_with_the_serializer(body):
    fast = validate_session(body)
    ser = SessionIn(data=body)
    if not ser.is_valid():
        assert fast is None, (body, ser.errors)
    elif fast is not None:
        assert plain(fast) == plain(ser.validated_data)


EDGES = [
    None,
    "",
    "  ",
    " x ",
    "a\x00b",
    "\ud800",
    -1,
    0,
    1,
    2**31,
    2**31 - 1,
    1.0,
    2.5,
    True,
    "7",
    "NaN",
    [],
    ["x"],
    [""],
    {},
    "2026-01-01T00:00:00",
    "not-a-uuid",
    "LIKED",
    "SUCCESS",
    "explicit_user",
    "AI_AGENT",
    "x" * 201,
]


def valid_body() -> dict:
    return {
        "session_id": "s-1",
        "request_id": "r-1",
        "namespace_scope": ["support"],
        "context_budget": 4096,
        "tokens_used": 10,
        "context_text": "t",
        "context_tags": ["a"],
        "outcome": "SUCCESS",
        "response_text": "Alice uses Python",
        "detect": True,
        "ts": "2026-01-01T00:00:00Z",
        "injections": [
            {
                "object_id": "6a2f41a3-c54c-4b1a-8c1f-0a1b2c3d4e5f",
                "rank_position": 1,
                "representation_type": "S",
                "token_cost": 5,
                "composite_score": 0.5,
                "str_value": 0.1,
            }
        ],
        "signals": [
            {
                "object_id": "6a2f41a3-c54c-4b1a-8c1f-0a1b2c3d4e5f",
                "signal_type": "CONFIRMED",
                "detection_method": "explicit_user",
                "actor_id": "u",
                "actor_type": "HUMAN_USER",
                "evidence_ids": ["d"],
            }
        ],
    }


PATHS = (
    [(k,) for k in valid_body()]
    + [("injections", 0, k) for k in valid_body()["injections"][0]]
    + [("signals", 0, k) for k in valid_body()["signals"][0]]
    + [("namespace_scope", 0), ("context_tags", 0), ("signals", 0, "evidence_ids", 0)]
)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(PATHS), st.sampled_from(EDGES), st.booleans())
def test_one_changed_field_is_judged_the_same(path, value, delete):
    body = valid_body()
    target = body
    for key in path[:-1]:
        target = target[key]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    fast = validate_session(body)
    ser = SessionIn(data=body)
    if not ser.is_valid():
        assert fast is None, (path, value, ser.errors)
    elif fast is not None:
        assert plain(fast) == plain(ser.validated_data), (path, value)


def test_ordinary_bodies_take_the_fast_path():
    body = {
        "session_id": "s-1",
        "request_id": "r-1",
        "namespace_scope": ["support", "support"],
        "context_budget": 4096,
        "tokens_used": 1840,
        "context_text": " what stack ",
        "context_tags": ["alice"],
        "outcome": "SUCCESS",
        "ts": "2026-01-01T00:00:00+00:00",
        "injections": [
            {
                "object_id": str(uuid.uuid4()),
                "rank_position": 1,
                "representation_type": "STRUCTURED",
                "token_cost": 48,
                "composite_score": 0.73,
            }
        ],
        "signals": [
            {
                "object_id": str(uuid.uuid4()),
                "signal_type": "REFERENCED",
                "detection_method": "response_analysis",
                "actor_id": "analyser",
                "actor_type": "SYSTEM_PROCESS",
                "evidence_ids": ["d1"],
            }
        ],
    }
    fast = validate_session(body)
    assert fast is not None and fast["namespace_scope"] == ["support"]
    ser = SessionIn(data=body)
    assert ser.is_valid()
    assert plain(fast) == plain(ser.validated_data)
