"""This deployment's stable id: 16 hex digits (64 random bits), generated once and stored in the
database (``rms.models.Deployment``), so it survives restarts and every web and worker process
of the deployment reads the same one.

The change feed puts it in every cursor it hands out (``rms.events.encode_cursor``), and
refuses a cursor that names another (``rms.changes.position``): a consumer's cursor from
another deployment, or from a database since replaced by a fresh one, is a clear 400 instead
of a position silently read in a log it does not belong to.

The row is written by migration ``rms/0010``; a database whose table was emptied (a test
flush) gets a new one on first use, ``get_or_create`` settling a race between processes on
the primary key. A process caches the id once it has read a committed row, so the feed's hot
path costs no query.
"""

from __future__ import annotations

import secrets

from django.db import connection

#: Hex digits of an id (``secrets.token_hex(8)``): two deployments collide with chance 2⁻⁶⁴.
ID_LENGTH = 16

_cached: str | None = None


def new_id() -> str:
    return secrets.token_hex(ID_LENGTH // 2)


def current() -> str:
    """This deployment's id (read once per process, created if the row is missing)."""
    global _cached
    found = _cached
    if found is not None:
        return found
    from rms.models import Deployment

    row, _ = Deployment.objects.get_or_create(
        pk=Deployment.ONE, defaults={"deployment_id": new_id()}
    )
    # Inside a transaction the row may be this transaction's own insert, which a rollback would
    # undo: cache only what autocommit read (committed, so every process sees the same).
    if not connection.in_atomic_block:
        _cached = row.deployment_id
    return row.deployment_id


def forget() -> None:
    """Drop the cached id (tests that replace the row: another deployment's database)."""
    global _cached
    _cached = None
