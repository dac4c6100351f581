"""Webhook tasks (STYLE §6–§8): thin. ``dispatch_webhooks`` runs one dispatcher pass; beat sends
it every RMS_WEBHOOK_DISPATCH_EVERY seconds (expiring, so no backlog builds up), and the API
sends one after a test event or a manual retry commits. Passes are idempotent and may overlap:
cursors move by compare-and-swap and deliveries are claimed by lease."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_process_shutdown

from delivery import dispatch

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, soft_time_limit=60, time_limit=90)
def dispatch_webhooks() -> dict:
    result = dispatch.run_pass()
    return {"created": result.created, "claimed": result.claimed, "finished": result.finished}


@worker_process_shutdown.connect
def _close_delivery_threads(**kwargs) -> None:
    """A worker process going away closes its delivery threads' connections."""
    dispatch.shutdown_pool()
