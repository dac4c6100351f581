"""Schemathesis against the live server: every operation of the published document,
with a token of each role, at least 2,000 generated cases; any 5xx, an undocumented status or
content type, or an answer off its schema fails the test.

Negative cases (inputs that break the schema) are held to the same checks, but not to
schemathesis's ``negative_data_rejection``: the API reads an empty ``?as_of=`` as absent, and
answers a batch's invalid items inside its 207, on purpose.

Generation is derandomized (the same cases on every run, so CI is reproducible) and not shrunk
(a failure is reported as found: the point is the list, and shrinking would cost minutes).
Path ids and ``?namespace=`` are drawn half the time from rows made here, so the fuzzer
reaches the code behind the 404s as well as the 404s.
"""

from __future__ import annotations

import itertools
import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.factories import make_client, make_namespace

#: Per operation and role: valid inputs, then inputs that break the schema (must be a 4xx).
CASES = {GenerationMode.POSITIVE: 20, GenerationMode.NEGATIVE: 10}
MIN_CASES = 2000
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def fuzz_world(transactional_db, monkeypatch):
    """Rows for the path parameters, and a token per role. Tasks are recorded, not sent."""
    from taskruns import runs

    monkeypatch.setattr(runs, "enqueue", lambda run: None)
    make_namespace("support")
    tokens = {
        role: make_client(f"{role}-fuzz", role, ["support"] if role == "client" else None)[1]
        for role in ("client", "operator", "admin")
    }
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {tokens['client']}")
    obj = {"namespace": "support", "content": "Alice prefers Python", "epistemic_type": "ASSERTED"}
    a = api.post("/api/v1/objects", obj, format="json").json()["id"]
    b = api.post("/api/v1/objects", {**obj, "epistemic_type": "CONDITIONAL"}, format="json")
    b = b.json()["id"]
    rel = {"source": a, "target": b, "relation": "supports", "extraction_context": "EXPLICIT"}
    r = api.post("/api/v1/relationships", rel, format="json").json()["id"]
    session = {
        "session_id": "fuzz-1",
        "request_id": "fuzz-1",
        "namespace_scope": ["support"],
        "context_budget": 1000,
        "tokens_used": 10,
        "injections": [{"object_id": a, "token_cost": 10}],
    }
    s = api.post("/api/v1/feedback-sessions", session, format="json").json()["id"]
    api.credentials(HTTP_AUTHORIZATION=f"Token {tokens['operator']}")
    t = api.post("/api/v1/tasks", {"kind": "verify_chain"}, format="json").json()["id"]
    ids = {
        "object_id": [a, b],
        "relationship_id": [r],
        "session_id": [s],
        "task_id": [t],
        "name": ["support"],
    }
    return tokens, ids


def with_known_ids(case_strategy, ids: dict[str, list[str]]):
    """Half the cases get a real row's id in the path and ``namespace=support``."""

    @st.composite
    def build(draw):
        case = draw(case_strategy)
        for name in list(case.path_parameters or {}):
            if name in ids and draw(st.booleans()):
                case.path_parameters[name] = draw(st.sampled_from(ids[name]))
        if case.query and "namespace" in case.query and draw(st.booleans()):
            case.query["namespace"] = "support"
        return case

    return build()


def fuzzer(operation, mode, ids, base_url: str, headers: dict, label: str, counts: dict):
    """A Hypothesis test of one operation as one role, counting its cases in ``counts``."""

    @settings(
        max_examples=CASES[mode],
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=with_known_ids(operation.as_strategy(generation_mode=mode), ids))
    def fuzz(case):
        counts[label] = counts.get(label, 0) + 1
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)

    return fuzz


@pytest.mark.django_db(transaction=True)
def test_fuzzing_every_operation_as_each_role_finds_nothing(live_server, fuzz_world):
    tokens, ids = fuzz_world
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema?format=json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30
    failures: dict[str, str] = {}
    counts: dict[str, int] = {}
    started = time.monotonic()

    for role, token in tokens.items():
        headers = {"Authorization": f"Token {token}"}
        for operation, mode in itertools.product(operations, CASES):
            label = f"{role} {operation.method.upper()} {operation.path} ({mode.value})"
            fuzz = fuzzer(operation, mode, ids, live_server.url, headers, label, counts)
            try:
                fuzz()
            except (KeyboardInterrupt, SystemExit):
                raise
            except Unsatisfiable:  # nothing to break: an operation without parameters or body
                assert mode is GenerationMode.NEGATIVE, label
            except BaseException as exc:  # every operation is fuzzed; all failures reported
                failures[label] = f"{type(exc).__name__}: {exc}"[:1500]

    elapsed = time.monotonic() - started
    total = sum(counts.values())
    report = "\n\n".join(f"{label}:\n{text}" for label, text in sorted(failures.items()))
    assert not failures, (
        f"{len(failures)} operations failed ({total} cases, {elapsed:.0f} s):\n{report}"
    )
    assert total >= MIN_CASES, f"only {total} cases generated"
    assert {label.split(" ", 1)[0] for label in counts} == {"client", "operator", "admin"}
