"""The API's vocabularies (API.md, SPEC §2) that the client checks before anything is queued.

A copy, since the client runs without the service's code; ``tests/client/test_vocabulary.py``
pins it to the service's policy and to the enums of the OpenAPI document the service serves.
The service's own sweep signal and detection method are left out: the API refuses them from a
client, so the client refuses them first.
"""

from __future__ import annotations

#: The neutral signal: the recorder allows at most one per object in a session (SPEC §7).
UNUSED = "UNUSED"
SIGNAL_TYPES = frozenset(
    {
        "REFERENCED",
        "CONFIRMED",
        "TASK_COMPLETED_WITH",
        "CORROBORATED_BY_EXTERNAL",
        "CORRECTED",
        "CONTRADICTED_BY_OBSERVATION",
        "TASK_FAILED_WITH",
        UNUSED,
    }
)
DETECTION_METHODS = frozenset(
    {
        "explicit_user",
        "structured_evaluation",
        "tool_validation",
        "external_crosscheck",
        "observation",
        "response_analysis",
        "implicit_behavioural",
    }
)
ACTOR_TYPES = frozenset({"HUMAN_USER", "AI_AGENT", "SYSTEM_PROCESS", "EXTERNAL_CONNECTOR"})
OUTCOMES = frozenset({"SUCCESS", "PARTIAL", "FAILED"})

__all__ = ["ACTOR_TYPES", "DETECTION_METHODS", "OUTCOMES", "SIGNAL_TYPES", "UNUSED"]
