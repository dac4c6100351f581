"""Celery tasks of OTLP ingestion (STYLE §6–§8): thin, idempotent (each trace is claimed with a
compare-and-swap in ``otlp.services.trace_assemble``), retried only on transient database
errors."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from otlp import services

TRANSIENT = (OperationalError, InterfaceError)


@shared_task(
    name=services.ASSEMBLE_TRACES,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=3,
    soft_time_limit=120,
    time_limit=180,
)
def assemble_traces(trace_pks: list[int]) -> int:
    """Write the sessions of the traces an export completed (queued after its commit)."""
    return len(services.traces_assemble(trace_pks=[int(pk) for pk in trace_pks]))


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=TRANSIENT,
    retry_backoff=5,
    max_retries=3,
    soft_time_limit=600,
    time_limit=660,
)
def flush_traces() -> int:
    """Beat: assemble complete traces whose message was lost and traces gone quiet."""
    return services.traces_flush()
