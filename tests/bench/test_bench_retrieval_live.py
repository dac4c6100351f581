"""The retrieval bench's simulated clock through a live server (pytest-django's ``live_server``):
with sessions a day apart, the default arm (objects and sessions over HTTP, the recorder, the
mirror, ``RMSRetriever``) shows the in-process simulation's memories at every session; with no
time passing it does not, so the days reach the server and the mirror."""

import importlib.util
from datetime import timedelta
from pathlib import Path

import pytest

from feedback.simulations.precision import precision_simulation
from tests.factories import make_client

ROOT = Path(__file__).resolve().parents[2]
#: A seed whose replay without days already ranks differently from the simulation at session 2
#: (the bench's 50-session run without days, docs/DECISIONS.md "Retrieval bench on a simulated
#: clock"); a short run keeps the test cheap.
SEED, SESSIONS = 2, 4


def load_bench():
    path = ROOT / "bench" / "bench_retrieval.py"
    spec = importlib.util.spec_from_file_location("bench_retrieval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def admin_token(live_server, transactional_db):
    return make_client("bench-admin", "admin")[1]


def test_daily_sessions_replay_the_simulation(live_server, admin_token):
    bench = load_bench()
    series = bench.run_arm(live_server.url, admin_token, "default", SEED, SESSIONS)
    assert bench.first_divergence(series, precision_simulation(SEED, sessions=SESSIONS)) is None
    assert all(r["mirror_diff"] <= bench.MIRROR_TOLERANCE for r in series)


def test_without_days_the_ranking_is_not_the_simulations(live_server, admin_token):
    bench = load_bench()
    bench.DAY = timedelta(0)  # every session at the origin: decay and hotness do not move
    series = bench.run_arm(live_server.url, admin_token, "default", SEED, SESSIONS)
    assert bench.first_divergence(series, precision_simulation(SEED, sessions=SESSIONS)) == 2
