"""The background recorder against a live server: close, flush_interval, a full queue (drop and
block), a forked child, interpreter exit; and the builder's local checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from rms_client import RMSClient, RMSValidationError

from feedback.models import FeedbackSession
from rms.models import ApiClient
from tests.client.conftest import FAST
from tests.factories import make_object

pytestmark = pytest.mark.django_db(transaction=True)


def _ids(n=2):
    owner = ApiClient.objects.get(name="client-1")
    return [str(make_object(owner, content=f"fact {i}").pk) for i in range(n)]


def _record(rec, oid, n, prefix):
    for i in range(n):
        with rec.interaction("support", context_budget=500, session_id=f"{prefix}-{i}") as it:
            it.injected(oid, token_cost=50)


def sessions(prefix=""):
    qs = FeedbackSession.objects.filter(session_id__startswith=prefix)
    return sorted(qs.values_list("session_id", flat=True))


def test_close_delivers_a_non_empty_queue(env):
    (oid,) = _ids(1)
    with RMSClient(env.url, env.client, **FAST) as client:
        # nothing would be sent for a minute: only close() sends
        with client.recorder(flush_at=1000, flush_interval=60) as rec:
            _record(rec, oid, 250, "c")
            assert rec.stats["sent"] == 0 and rec.stats["pending"] == 250
        assert rec.stats == {"queued": 250, "sent": 250, "failed": 0, "dropped": 0,
                             "retried": 0, "pending": 0}  # fmt: skip
    assert len(sessions("c-")) == 250


def test_flush_interval_sends_without_being_asked(env):
    (oid,) = _ids(1)
    with RMSClient(env.url, env.client, **FAST) as client:
        rec = client.recorder(flush_at=100, flush_interval=0.2)
        _record(rec, oid, 3, "t")
        deadline = time.monotonic() + 10
        while rec.stats["sent"] < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rec.stats["sent"] == 3
        rec.close()


def test_a_full_queue_drops_and_counts(env, caplog):
    (oid,) = _ids(1)
    with RMSClient(env.url, env.client, **FAST) as client:
        rec = client.recorder(flush_at=1000, flush_interval=60, max_queue=5)
        with caplog.at_level("WARNING", logger="rms_client"):
            _record(rec, oid, 8, "d")
        assert rec.stats["dropped"] == 3 and rec.stats["queued"] == 5
        assert sum("queue full" in r.getMessage() for r in caplog.records) == 1  # once a burst
        rec.close()
        assert rec.stats["sent"] == 5
    assert sessions("d-") == [f"d-{i}" for i in range(5)]


def test_on_full_block_waits_for_room_instead(env):
    (oid,) = _ids(1)
    with RMSClient(env.url, env.client, **FAST) as client:
        with client.recorder(flush_at=2, flush_interval=0.05, max_queue=2, on_full="block") as rec:
            _record(rec, oid, 20, "b")
        assert rec.stats["dropped"] == 0 and rec.stats["sent"] == 20
    assert len(sessions("b-")) == 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_records_its_own_interactions(env):
    (oid,) = _ids(1)
    client = RMSClient(env.url, env.client, **FAST)
    client.get_object(oid)  # the parent's pool has an open connection the child must not use
    rec = client.recorder(flush_at=1000, flush_interval=60)
    _record(rec, oid, 3, "parent")  # queued in the parent at the fork
    pid = os.fork()
    if pid == 0:  # the child: a fresh queue and thread; the parent's 3 are the parent's to send
        code = 3
        try:
            assert rec.stats["queued"] == 0
            _record(rec, oid, 5, "child")
            ok = rec.flush(timeout=30)
            stats = rec.stats
            code = 0 if ok and stats["sent"] == 5 and stats["queued"] == 5 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    rec.close()
    assert rec.stats["sent"] == 3
    client.close()
    assert sessions("parent") == [f"parent-{i}" for i in range(3)]
    assert sessions("child") == [f"child-{i}" for i in range(5)]


def test_interpreter_exit_flushes_and_the_client_needs_no_django(env):
    (oid,) = _ids(1)
    script = textwrap.dedent(
        f"""
        import sys
        import rms_client
        assert "django" not in sys.modules, "rms_client imported Django"
        client = rms_client.RMSClient({env.url!r}, {env.client!r}, timeout=5)
        rec = client.recorder(flush_at=1000, flush_interval=60)
        for i in range(7):
            with rec.interaction("support", context_budget=100, session_id=f"exit-{{i}}") as it:
                it.injected({oid!r}, token_cost=10)
        print("queued", rec.stats["queued"])
        """  # no close(): atexit must deliver
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "queued 7"
    assert sessions("exit-") == [f"exit-{i}" for i in range(7)]


def test_the_builder_checks_locally_and_raises_at_once():
    client = RMSClient("http://127.0.0.1:9", "t")  # never reached: nothing here is sent
    rec = client.recorder(flush_at=1000, flush_interval=60)
    oid, other = "8f7e1f0e-0000-4000-8000-000000000001", "8f7e1f0e-0000-4000-8000-000000000002"
    it = rec.interaction(["support", "billing"], context_budget=300, context_text="q")
    it.injected(oid, token_cost=40).injected(other, rank=5, token_cost=2, composite_score=0.7)
    with pytest.raises(RMSValidationError) as exc:
        it.injected(oid, token_cost=1)
    assert exc.value.fields == {"injections.2.object_id": ["Injected twice."]}
    assert isinstance(exc.value, ValueError) and exc.value.status is None
    with pytest.raises(RMSValidationError, match="Unknown signal type"):
        it.signal(oid, "LIKED")
    with pytest.raises(RMSValidationError, match="Unknown signal type"):
        it.signal(oid, "IGNORED_REPEATEDLY")  # the service's own sweep signal
    with pytest.raises(RMSValidationError, match="detection method"):
        it.signal(oid, "CONFIRMED", detection_method="injection_tracking")
    with pytest.raises(RMSValidationError, match="actor type"):
        it.signal(oid, "CONFIRMED", actor_type="ROBOT")
    it.signal(oid, "UNUSED")
    with pytest.raises(RMSValidationError, match="one UNUSED"):
        it.signal(oid, "UNUSED")
    with pytest.raises(RMSValidationError, match="outcome"):
        it.outcome("GREAT")
    with pytest.raises(RMSValidationError, match="token_cost"):
        it.injected("8f7e1f0e-0000-4000-8000-000000000003", token_cost=0)
    with pytest.raises(RMSValidationError, match="detect"):
        it.response("   ")
    body = it.response("Alice uses Python").outcome("PARTIAL").build()
    assert body["namespace_scope"] == ["support", "billing"]
    assert body["tokens_used"] == 42  # the sum of token_cost
    assert [(i["rank_position"], i["token_cost"]) for i in body["injections"]] == [(1, 40), (5, 2)]
    assert body["signals"] == [{"object_id": oid, "signal_type": "UNUSED"}]
    assert body["detect"] is True and body["outcome"] == "PARTIAL"
    assert body["request_id"] and body["session_id"]  # generated once, at creation
    assert body["request_id"] == it.request_id

    # a misused builder inside `with` records nothing; another exception records a FAILED turn
    with pytest.raises(RMSValidationError), rec.interaction("support", context_budget=1) as bad:
        bad.signal(oid, "LIKED")
    assert rec.stats["queued"] == 0
    with pytest.raises(ZeroDivisionError), rec.interaction("support", context_budget=1) as turn:
        turn.injected(oid, token_cost=1)
        1 / 0  # noqa: B018 - the agent's own failure
    assert rec.stats["queued"] == 1 and turn.body["outcome"] == "FAILED"
    assert rec.close(timeout=0) is False  # nothing could be delivered in no time
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        rec.interaction("support", context_budget=1).record()
