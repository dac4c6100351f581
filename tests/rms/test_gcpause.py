"""rms.gcpause: the collector is off inside, back on after the last block, whatever happens."""

from __future__ import annotations

import gc
import threading

import pytest

from rms import gcpause


@pytest.fixture(autouse=True)
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


class OtherThread:
    """Another thread inside ``paused()`` from :meth:`start` until :meth:`finish`."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with gcpause.paused():
            self.inside.set()
            self.release.wait(5)

    def start(self) -> None:
        self.thread.start()
        assert self.inside.wait(5)

    def finish(self) -> None:
        self.release.set()
        self.thread.join()


def test_paused_and_restored_even_on_error():
    with pytest.raises(RuntimeError), gcpause.paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_and_overlapping_blocks_restore_only_at_the_last_exit():
    other = OtherThread()
    with gcpause.paused():
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        other.start()
    assert not gc.isenabled()  # the other thread's block is still open
    other.finish()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    with gcpause.paused():
        pass
    assert not gc.isenabled()


@pytest.mark.django_db
def test_a_feedback_batch_is_recorded_with_the_collector_paused(monkeypatch, client_api):
    from feedback import ingest

    seen = []
    real = ingest._record

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "_record", spy)
    out = ingest.record_sessions(client=client_api.row, items=[])
    assert out == [] and seen == [False]
    assert gc.isenabled()


def test_overlapping_blocks_under_steady_load_still_collect_cycles(monkeypatch):
    import weakref

    class Node:
        pass

    monkeypatch.setattr(gcpause, "MAX_PAUSE", 0.0)
    other = OtherThread()
    other.start()  # the other thread keeps the collector off throughout
    with gcpause.paused():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: reference counting alone never frees it
        ref = weakref.ref(a)
        del a, b
        assert ref() is not None
    assert not gc.isenabled()  # still paused for the other thread...
    assert ref() is None  # ...but this block's end collected the young generation
    other.finish()
    assert gc.isenabled()
