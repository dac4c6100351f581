"""``examples/agent_loop.py`` as a user runs it: a subprocess against a live gunicorn on the test
database, from a copy outside the checkout (as from the client's own environment, where the
service's ``manage.py`` is nowhere to be found)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rms.models import MemoryObject
from tests.factories import make_client, make_namespace
from tests.servers import free_port, gunicorn

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def run_example(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "agent_loop.py"
    shutil.copy(ROOT / "examples" / "agent_loop.py", script)
    full_env = {k: v for k, v in os.environ.items() if k not in {"RMS_URL", "RMS_TOKEN"}}
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=tmp_path, env={**full_env, **env},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_without_a_token_it_says_how_to_get_one(tmp_path):
    result = run_example(tmp_path, "--url", f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "--token" in result.stderr and "RMS_TOKEN" in result.stderr
    assert "create_api_client" in result.stderr


def test_a_server_elsewhere_is_a_clear_message_not_a_traceback(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run_example(tmp_path, "--turns", "1", RMS_URL=url, RMS_TOKEN="t" * 40)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"cannot reach the RMS service at {url}" in result.stderr
    assert "--url" in result.stderr and "RMS_URL" in result.stderr


def test_against_a_live_server_it_runs_and_reuses_its_memories(tmp_path):
    make_namespace("support")
    _, token = make_client("agent-loop-example", "client", ["support"])
    with gunicorn(tmp_path) as server:
        url = f"http://127.0.0.1:{server.port}"
        outputs = []
        for _ in range(2):
            result = run_example(tmp_path, "--turns", "5", "--url", url, RMS_TOKEN=token)
            assert result.returncode == 0, result.stdout + result.stderr + server.log()
            outputs.append(result.stdout)
    # the metrics it prints say which window they cover
    assert "metrics of support, sessions from 20" in outputs[0]
    assert "unused_injection_rate" in outputs[0]
    assert MemoryObject.objects.filter(namespace__name="support").count() == 6
