"""A ranker answered by the live server's ``/rank``: what the re-ranking integrations are tested
with beside the in-process mirror (the mirror must give the same scores, so the re-ranked order
they produce is the order ``/rank`` gives)."""

from __future__ import annotations

from rms_client import RMSClient


class ServerRanker:
    """``rank`` and ``get`` in the mirror's shape, each ``rank`` one ``POST /rank``."""

    def __init__(self, client: RMSClient, namespace: str, known: set[str]) -> None:
        self.client, self.namespace, self.known = client, namespace, known
        self.calls: list[list[tuple[str, float]]] = []

    def get(self, object_id: str) -> dict | None:
        return {"object_id": object_id} if object_id in self.known else None

    def rank(self, candidates, now=None) -> list[dict]:
        self.calls.append(list(candidates))
        return self.client.rank(self.namespace, candidates)
