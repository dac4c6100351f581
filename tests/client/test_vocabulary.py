"""The client checks signal types, detection methods, actor types and outcomes before anything
is queued, from its own copy of the vocabularies (it runs without Django). The copy is pinned
here to the server twice: to ``rms.policy`` and to the enums of the OpenAPI document the
running server serves, so a type added on the server fails this file until the client knows it.
"""

from __future__ import annotations

import httpx
import pytest
from rms_client import vocabulary

from feedback.models import FeedbackSession
from rms import policy

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def schema_enums(live_server) -> dict[str, set]:
    response = httpx.get(f"{live_server.url}/api/v1/schema?format=json", timeout=30)
    assert response.status_code == 200, response.text
    schemas = response.json()["components"]["schemas"]
    return {name: set(body["enum"]) for name, body in schemas.items() if "enum" in body}


def the_clients() -> dict[str, set[str]]:
    return {
        "signal types": set(vocabulary.SIGNAL_TYPES),
        "detection methods": set(vocabulary.DETECTION_METHODS),
        "actor types": set(vocabulary.ACTOR_TYPES),
        "outcomes": set(vocabulary.OUTCOMES),
    }


def test_the_clients_vocabularies_are_the_policys():
    assert the_clients() == {
        "signal types": set(policy.SIGNAL_TYPES) - policy.SYSTEM_ONLY_SIGNALS,
        "detection methods": set(policy.DETECTION_METHODS) - policy.SYSTEM_ONLY_METHODS,
        "actor types": set(policy.ACTOR_TYPES),
        "outcomes": set(FeedbackSession.OUTCOMES),
    }


def test_the_clients_vocabularies_are_the_served_schemas(schema_enums):
    # The schema lists every type the API may answer with; a client may send all but the
    # service's own (the sweep's signal and its detection method).
    assert the_clients() == {
        "signal types": schema_enums["SignalTypeEnum"] - policy.SYSTEM_ONLY_SIGNALS,
        "detection methods": schema_enums["DetectionMethodEnum"] - policy.SYSTEM_ONLY_METHODS,
        "actor types": schema_enums["ActorTypeEnum"],
        "outcomes": schema_enums["OutcomeEnum"],
    }


def test_the_recorder_refuses_what_the_vocabulary_does_not_hold():
    # The recorder checks against this module, not a copy of its own.
    from rms_client import recorder

    assert recorder.SIGNAL_TYPES is vocabulary.SIGNAL_TYPES
    assert recorder.DETECTION_METHODS is vocabulary.DETECTION_METHODS
    assert recorder.ACTOR_TYPES is vocabulary.ACTOR_TYPES
    assert recorder.OUTCOMES is vocabulary.OUTCOMES


def test_the_clients_neutral_signal_is_the_policys():
    """The recorder allows one UNUSED per object; its name is the policy's neutral type."""
    assert policy.signals_of_kind(policy.NEUTRAL) == {vocabulary.UNUSED}
