"""The webhook dispatcher: follows the change feed for every active endpoint and delivers.

One pass (``run_pass``, the ``dispatch_webhooks`` task) does two things, each safe to run on any
number of workers at once:

1. **Pump.** For each active endpoint, read the feed after its cursor (no transaction, no lock),
   then in one short transaction move the cursor by compare-and-swap and create one delivery per
   event (unique per endpoint and event). A dispatcher that lost the race writes nothing.
2. **Deliver.** Claim due deliveries by compare-and-swap on a lease, a bounded number per
   endpoint and none of an endpoint inside its backoff, commit, and only then POST them from a
   thread pool (``delivery.sender``) — no HTTP call ever runs while a database lock is held.
   The claims wait in per-endpoint lanes (``Lanes``), sent back to back by at most
   RMS_WEBHOOK_PER_ENDPOINT threads per endpoint. Successes are stored a tick at a time in one
   statement; a failure is stored at once, in its own short transaction, and backs the endpoint
   off.

A slow endpoint holds at most RMS_WEBHOOK_PER_ENDPOINT pool threads for at most the timeout, and
a failing one is backed off as a whole; a pass never waits for one attempt, so every other
endpoint goes on. A worker lost mid-attempt leaves a lease that expires: the delivery is
attempted again with the same ``webhook-id`` (at least once, as the Standard Webhooks
specification expects).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Count, Q
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from delivery import policy, safety, sender
from delivery.models import WebhookDelivery, WebhookEndpoint
from rms import changes, events, store, telemetry

logger = logging.getLogger(__name__)

CLAIM_LIMIT = 256  # deliveries a pass holds claimed at once, queued in its lanes
AHEAD = 8  # an endpoint's claims: up to this many times RMS_WEBHOOK_PER_ENDPOINT
PUMP_PAGE = 500
PUMP_PAGES = 20  # per endpoint and pass: a long backlog is worked off over several passes
LEASE = timedelta(seconds=policy.TIMEOUT + 20)
TICK = 0.05  # seconds between a pass's claims
TAIL = 1.0  # seconds of lease an attempt may need beyond the timeout (recording it)
PUMP_EVERY = 0.2  # seconds between a pass's reads of the feed

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's delivery threads (made after a fork, so each worker process has its own)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.RMS_WEBHOOK_THREADS, thread_name_prefix="webhook"
            )
        return _pool


def shutdown_pool(timeout: float = 15.0) -> None:
    """Stop the process's delivery threads, closing each one's database connection (a worker
    shutting down, a test tearing down its database). Attempts in flight finish first."""
    global _pool
    with _pool_lock:
        executor, _pool = _pool, None
    if executor is None:
        return
    threads = len(executor._threads)
    barrier = threading.Barrier(threads) if threads else None

    def close_here() -> None:
        connection.close()
        sender.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout)  # holds this thread so each thread runs one of these

    for _ in range(threads):
        executor.submit(close_here)
    executor.shutdown(wait=True)


def body_of(event: dict) -> str:
    """The delivered body: the event's canonical JSON, identical on every retry."""
    return json.dumps(event, sort_keys=True, separators=(",", ":"))


def endpoint_types(endpoint: WebhookEndpoint) -> frozenset[str] | None:
    types = frozenset(endpoint.event_types) & frozenset(events.FEED_TYPES)
    return types or None


# --- pump ---------------------------------------------------------------------------------------


def pump(endpoint_ids=None) -> int:
    """Turn new feed events into deliveries for every active endpoint; returns how many."""
    qs = WebhookEndpoint.objects.filter(state=WebhookEndpoint.ACTIVE)
    if endpoint_ids is not None:
        qs = qs.filter(pk__in=endpoint_ids)
    created = 0
    for endpoint in qs.only("id", "namespaces", "event_types", "cursor_txid", "cursor_seq"):
        for _ in range(PUMP_PAGES):
            made, more = _pump_page(endpoint)
            created += made
            if not more:
                break
    return created


def _pump_page(endpoint: WebhookEndpoint) -> tuple[int, bool]:
    after = events.Position(endpoint.cursor_txid, endpoint.cursor_seq)
    page = changes.read(
        after,
        limit=PUMP_PAGE,
        namespaces=endpoint.namespaces or None,
        types=endpoint_types(endpoint),
    )
    if page.next == after:
        return 0, False
    rows = [
        WebhookDelivery(
            endpoint_id=endpoint.pk,
            event_id=event["id"],
            event_type=event["type"],
            event=event,
            next_attempt_at=timezone.now(),
        )
        for event in page.events
    ]
    with transaction.atomic():
        moved = WebhookEndpoint.objects.filter(
            pk=endpoint.pk,
            state=WebhookEndpoint.ACTIVE,
            cursor_txid=after.txid,
            cursor_seq=after.seq,
        ).update(cursor_txid=page.next.txid, cursor_seq=page.next.seq)
        if not moved:  # another dispatcher took this page (or the endpoint changed)
            return 0, False
        WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    endpoint.cursor_txid, endpoint.cursor_seq = page.next.txid, page.next.seq
    return len(rows), page.has_more


# --- claim and attempt --------------------------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    delivery_id: object
    endpoint_id: object
    url: str
    secret: str
    event: dict
    lease_until: datetime
    attempts: int = 0
    first_attempt_at: datetime | None = None
    retry_until: datetime | None = None
    token: uuid.UUID | None = None  # the claim's compare-and-swap mark


def claim_due(now: datetime | None = None, limit: int = CLAIM_LIMIT) -> list[Claimed]:
    """Due deliveries of active endpoints outside their backoff, each claimed by a
    compare-and-swap on its lease (so two dispatchers never both send one), at most
    ``AHEAD`` × RMS_WEBHOOK_PER_ENDPOINT claimed per endpoint across all dispatchers."""
    if limit <= 0:
        return []
    now = now or timezone.now()
    per_endpoint = AHEAD * settings.RMS_WEBHOOK_PER_ENDPOINT
    busy = dict(
        WebhookDelivery.objects.filter(state=WebhookDelivery.PENDING, lease_until__gt=now)
        .order_by()
        .values("endpoint_id")
        .annotate(n=Count("pk"))
        .values_list("endpoint_id", "n")
    )
    candidates = (
        WebhookDelivery.objects.filter(
            state=WebhookDelivery.PENDING,
            next_attempt_at__lte=now,
            endpoint__state=WebhookEndpoint.ACTIVE,
        )
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lte=now))
        .filter(Q(endpoint__blocked_until__isnull=True) | Q(endpoint__blocked_until__lte=now))
        .order_by("next_attempt_at", "created_at")
        .values_list("pk", "endpoint_id")[: limit * 4]
    )
    chosen: list = []
    for pk, endpoint_id in candidates:
        if len(chosen) >= limit or busy.get(endpoint_id, 0) >= per_endpoint:
            continue
        busy[endpoint_id] = busy.get(endpoint_id, 0) + 1
        chosen.append(pk)
    if not chosen:
        return []
    # One compare-and-swap for the whole batch, marked with this claim's token: the rows another
    # dispatcher took meanwhile fail the condition and are not ours. Only the rows won are read
    # in full (their events decoded), after the swap.
    token = uuid.uuid4()
    lease_until = now + LEASE
    WebhookDelivery.objects.filter(pk__in=chosen, state=WebhookDelivery.PENDING).filter(
        Q(lease_until__isnull=True) | Q(lease_until__lte=now)
    ).update(lease_until=lease_until, claim_token=token)
    won = WebhookDelivery.objects.filter(pk__in=chosen, claim_token=token).values_list(
        "pk", "endpoint_id", "endpoint__url", "endpoint__secret", "event",
        "attempts", "first_attempt_at", "retry_until",
    )  # fmt: skip
    return [
        Claimed(pk, endpoint_id, url, secret, event, lease_until, attempts, first, until, token)
        for pk, endpoint_id, url, secret, event, attempts, first, until in won
    ]


@dataclass(frozen=True)
class Outcome:
    status: int | None
    latency_ms: float | None
    error: str


def send(claim: Claimed, *, now: datetime | None = None) -> Outcome:
    """POST one event, signed per the Standard Webhooks specification, to the checked address
    (``delivery.sender``). Never raises: every failure is an Outcome with a message that names
    no secret."""
    now = now or timezone.now()
    body = body_of(claim.event)
    msg_id = claim.event["id"]
    try:
        target = safety.resolve(claim.url)
    except safety.UnsafeURL as exc:
        return Outcome(None, None, f"refused: {exc}")
    headers = {
        "content-type": "application/json",
        "user-agent": "rms-feedback-webhooks/1",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(claim.secret).sign(msg_id, now, body),
    }
    started = time.perf_counter()
    try:
        response = sender.post(target, body.encode(), headers)
    except TimeoutError:
        elapsed = (time.perf_counter() - started) * 1000
        return Outcome(None, elapsed, f"timeout after {policy.TIMEOUT:g} s")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Outcome(None, None, f"{type(exc).__name__}: {_short(str(exc))}")
    latency = (time.perf_counter() - started) * 1000
    if policy.is_success(response.status):
        return Outcome(response.status, latency, "")
    return Outcome(response.status, latency, f"HTTP {response.status}")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def record(claim: Claimed, outcome: Outcome, *, now: datetime | None = None) -> str:
    """Store one attempt's outcome (one short transaction) and move the endpoint's health:
    success clears its backoff; failure backs it off, and 24 h without success disables it.
    Returns the delivery's new state. A lost lease (another dispatcher re-claimed an expired
    one) still records: the receiver got the call either way."""
    now = now or timezone.now()
    schedule = settings.RMS_WEBHOOK_RETRY_SCHEDULE
    if policy.is_success(outcome.status):
        record_successes([(claim, outcome, now)])
        return WebhookDelivery.SUCCEEDED
    with transaction.atomic():
        delivery = WebhookDelivery.objects.select_for_update().filter(pk=claim.delivery_id).first()
        if delivery is None:  # the endpoint was deleted meanwhile
            return WebhookDelivery.FAILED
        delivery.attempts += 1
        delivery.first_attempt_at = delivery.first_attempt_at or now
        delivery.retry_until = delivery.retry_until or now + settings.RMS_WEBHOOK_RETRY_WINDOW
        delivery.last_attempt_at = now
        delivery.response_status = outcome.status
        delivery.latency_ms = outcome.latency_ms
        delivery.last_error = outcome.error
        delivery.lease_until = None
        delivery.claim_token = None
        # A failure: the endpoint's health changes, under its row lock (failures are rare).
        endpoint = WebhookEndpoint.objects.select_for_update().get(pk=claim.endpoint_id)
        at = policy.next_attempt(
            now=now,
            attempts=delivery.attempts,
            retry_until=delivery.retry_until,
            unit_random=random.random(),
            schedule=schedule,
        )
        delivery.state = WebhookDelivery.PENDING if at else WebhookDelivery.FAILED
        delivery.next_attempt_at = at
        endpoint.last_failure_at = now
        endpoint.failing_since = endpoint.failing_since or now
        endpoint.consecutive_failures += 1  # the row is locked: no lost update
        delay = policy.retry_delay(endpoint.consecutive_failures, random.random(), schedule)
        endpoint.blocked_until = now + timedelta(seconds=delay)
        delivery.save()
        window = settings.RMS_WEBHOOK_DISABLE_AFTER
        if endpoint.state == WebhookEndpoint.ACTIVE and policy.should_disable(
            failing_since=endpoint.failing_since, now=now, window=window
        ):
            hours = window.total_seconds() / 3600
            disable(endpoint, f"No successful delivery for {hours:g} h.", now=now)
            delivery.refresh_from_db(fields=["state", "next_attempt_at"])
        endpoint.save()
    return delivery.state


_SUCCESS_FIELDS = (
    "state", "attempts", "first_attempt_at", "retry_until", "last_attempt_at", "response_status",
    "latency_ms", "last_error", "lease_until", "claim_token", "next_attempt_at",
)  # fmt: skip


def record_successes(done: list[tuple[Claimed, Outcome, datetime]]) -> None:
    """Store successful attempts in two statements whatever their number: the deliveries in
    one array update (``rms.store``; from the values read when they were claimed: the lease
    makes this dispatcher their only writer), and each endpoint's health in one conditional
    update, a no-op while nothing but the last success time changed (kept to the second). No
    endpoint row lock: 200 deliveries a second to one endpoint would queue on it."""
    if not done:
        return
    window = settings.RMS_WEBHOOK_RETRY_WINDOW
    rows = [
        (
            claim.delivery_id,
            WebhookDelivery.SUCCEEDED,
            claim.attempts + 1,
            claim.first_attempt_at or now,
            claim.retry_until or now + window,
            now,
            outcome.status,
            outcome.latency_ms,
            "",
            None,
            None,
            None,
        )
        for claim, outcome, now in done
    ]
    db = store.get()
    with db.pipelined():  # one statement over arrays at any batch size
        db.update_values(WebhookDelivery, list(_SUCCESS_FIELDS), rows)
    latest: dict = {}
    for claim, _, now in done:
        latest[claim.endpoint_id] = max(now, latest.get(claim.endpoint_id, now))
    for endpoint_id, now in latest.items():
        WebhookEndpoint.objects.filter(pk=endpoint_id).filter(
            Q(last_success_at__isnull=True)
            | Q(last_success_at__lt=now - timedelta(seconds=1))
            | Q(consecutive_failures__gt=0)
            | Q(blocked_until__isnull=False)
        ).update(last_success_at=now, failing_since=None, consecutive_failures=0,
                 blocked_until=None)  # fmt: skip


class Collector:
    """Where a pass gathers its successful attempts, to store them a tick at a time. An attempt
    that finishes after its pass has returned (a slow endpoint) is stored by its own thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[tuple[Claimed, Outcome, datetime]] = []
        self.open = True

    def offer(self, claim: Claimed, outcome: Outcome, now: datetime) -> bool:
        with self.lock:
            if self.open:
                self.done.append((claim, outcome, now))
            return self.open

    def take(self, *, close: bool = False) -> list:
        with self.lock:
            done, self.done = self.done, []
            self.open = self.open and not close
            return done


def disable(endpoint: WebhookEndpoint, reason: str, *, now: datetime) -> None:
    """Disable (inside the caller's transaction): its pending deliveries fail, so nothing is
    attempted while it is disabled; they stay in the log for a manual retry after re-enabling."""
    endpoint.state = WebhookEndpoint.DISABLED
    endpoint.disabled_reason = reason
    WebhookDelivery.objects.filter(endpoint=endpoint, state=WebhookDelivery.PENDING).update(
        state=WebhookDelivery.FAILED,
        next_attempt_at=None,
        lease_until=None,
        claim_token=None,
        last_error="endpoint disabled",
    )
    logger.warning("webhook endpoint %s disabled: %s", endpoint.pk, reason)


def attempt(claim: Claimed, collector: Collector | None = None) -> str:
    """Send and record one claimed delivery on a pool thread. A success goes to the pass's
    collector (stored with the rest of its tick in one statement), so a healthy delivery costs
    this thread no database round trip; a failure, or a success after its pass has returned,
    is stored here. The thread keeps its database connection between attempts (a new
    connection per delivery cost more than the delivery); ``close_old_connections`` drops it
    once it is broken or past its age."""
    outcome = send(claim)
    if policy.is_success(outcome.status):
        telemetry.WEBHOOK_ATTEMPTS.labels("succeeded").inc()
    else:
        telemetry.WEBHOOK_ATTEMPTS.labels("http_error" if outcome.status else "unreachable").inc()
    if outcome.latency_ms is not None:
        telemetry.WEBHOOK_LATENCY.observe(outcome.latency_ms / 1000)
    now = timezone.now()
    if (
        policy.is_success(outcome.status)
        and collector is not None
        and collector.offer(claim, outcome, now)
    ):
        return WebhookDelivery.SUCCEEDED
    close_old_connections()
    try:
        return record(claim, outcome, now=now)
    except Exception:
        connection.close()  # a broken connection is not reused
        raise


# --- one pass -----------------------------------------------------------------------------------


class Lanes:
    """A pass's claimed deliveries, queued per endpoint and sent by at most
    RMS_WEBHOOK_PER_ENDPOINT pool threads per endpoint, each taking the endpoint's next claim as
    soon as its attempt ends: an endpoint's throughput is its concurrency over its latency, not
    one batch per claim. A slow endpoint holds at most that many threads; after a failure (the
    endpoint is now backed off) its lane sends nothing more and its queued claims are released
    for a later pass. A claim whose lease could run out before its attempt does is not sent
    (another dispatcher may claim it once it expires)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.lock = threading.Lock()
        self.queues: dict = {}
        self.running: dict = {}
        self.stopped: set = set()
        self.released: list[Claimed] = []
        self.open = True

    def held(self) -> int:
        """Claims queued or being attempted."""
        with self.lock:
            return sum(map(len, self.queues.values())) + sum(self.running.values())

    def add(self, claims: list[Claimed]) -> list:
        """Queue claims and start the threads their endpoints may use; returns their futures."""
        starts = []
        with self.lock:
            for claim in claims:
                self.queues.setdefault(claim.endpoint_id, deque()).append(claim)
            for endpoint_id, queue in self.queues.items():
                running = self.running.get(endpoint_id, 0)
                more = min(len(queue), settings.RMS_WEBHOOK_PER_ENDPOINT - running)
                if more > 0:
                    self.running[endpoint_id] = running + more
                    starts += [endpoint_id] * more
        return [pool().submit(self.run, endpoint_id) for endpoint_id in starts]

    def _next(self, endpoint_id) -> Claimed | None:
        with self.lock:
            queue = self.queues[endpoint_id]
            if queue and self.open and endpoint_id not in self.stopped:
                return queue.popleft()
            self.running[endpoint_id] -= 1
            return None

    def run(self, endpoint_id) -> int:
        """One of an endpoint's threads: attempts its queued claims one after another."""
        done = 0
        while (claim := self._next(endpoint_id)) is not None:
            if claim.lease_until - timezone.now() < timedelta(seconds=policy.TIMEOUT + TAIL):
                continue  # queued too long: its lease could end during the attempt
            try:
                state = attempt(claim, self.collector)
            except Exception:
                logger.exception("webhook attempt failed")
                state = None
            done += 1
            if state != WebhookDelivery.SUCCEEDED:
                with self.lock:
                    self.stopped.add(endpoint_id)
        return done

    def close(self) -> list[Claimed]:
        """Stop every lane (attempts under way finish); returns the claims never started."""
        with self.lock:
            self.open = False
            left = [claim for queue in self.queues.values() for claim in queue]
            for queue in self.queues.values():
                queue.clear()
            return left

    def take_stopped(self) -> list[Claimed]:
        """The queued claims of lanes stopped by a failure, taken out to be released; the
        lanes open again for what is claimed once their endpoints' backoff is over."""
        with self.lock:
            left = []
            for endpoint_id in self.stopped:
                queue = self.queues.get(endpoint_id)
                if queue:
                    left += queue
                    queue.clear()
            self.stopped.clear()
            return left


def release(claims: list[Claimed]) -> None:
    """Give claims back unattempted (one statement): due again for any dispatcher at once."""
    if not claims:
        return
    WebhookDelivery.objects.filter(
        pk__in=[c.delivery_id for c in claims],
        claim_token__in={c.token for c in claims},
        state=WebhookDelivery.PENDING,
    ).update(lease_until=None, claim_token=None)


@dataclass(frozen=True)
class PassResult:
    created: int
    claimed: int
    finished: int


def run_pass(*, budget: float | None = None) -> PassResult:
    """Follow the feed and deliver for up to ``budget`` seconds (RMS_WEBHOOK_PASS_SECONDS):
    pump, claim what is due, queue the claims in per-endpoint lanes (``Lanes``), and every tick
    store the tick's successes, pump and claim again. A pass that finds nothing to do returns
    at once; one that found work follows the feed to the end of its budget, reading it every
    PUMP_EVERY while idle, so an event waits for the next read, not for the next pass. At the
    end, claims not yet started are released and attempts under way finish on their threads
    (they hold a lease, not a lock), so a slow endpoint never holds the pass — or the next one
    — back."""
    budget = settings.RMS_WEBHOOK_PASS_SECONDS if budget is None else budget
    deadline = time.monotonic() + budget
    close_old_connections()
    in_flight: set = set()
    collector = Collector()
    lanes = Lanes(collector)
    created = claimed = finished = 0
    pumped = 0.0
    while True:
        tick = time.monotonic() + TICK
        if tick - pumped >= PUMP_EVERY:
            created += pump()
            pumped = tick
        batch = claim_due(limit=max(0, CLAIM_LIMIT - lanes.held()))
        claimed += len(batch)
        in_flight.update(lanes.add(batch))
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not (in_flight or batch or created or claimed):
            break
        if not in_flight and not batch:  # caught up: wait for the next read of the feed
            time.sleep(max(0.0, min(remaining, pumped + PUMP_EVERY - TICK - time.monotonic())))
            continue
        # Pump and claim at most once a tick, not once per finished attempt: under load that
        # would be several statements per delivery for nothing.
        done, in_flight = wait_for(
            in_flight, timeout=max(0.0, min(remaining, tick - time.monotonic()))
        )
        record_successes(collector.take())  # frees their endpoints' slots for the next claim
        release(lanes.take_stopped())
        finished += sum(future.result() for future in done)
    release(lanes.close())
    # Attempts under way get one more tick to land in this pass's last statement.
    done, in_flight = wait_for(in_flight, timeout=TICK)
    finished += sum(future.result() for future in done)
    record_successes(collector.take(close=True))
    return PassResult(created, claimed, finished)
