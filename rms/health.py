"""Broker reachability for /health, with a short timeout so a dead broker never hangs it."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def broker_status(timeout: float = 1.0) -> str:
    if settings.CELERY_BROKER_IS_EMBEDDED:
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        return "ok" if folder.is_dir() else "unavailable"
    from rms.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
    except Exception:  # any transport error means the broker cannot take tasks now
        return "unavailable"
    return "ok"
