"""The README's ``make test`` on a machine with neither PostgreSQL nor Redis: tests that need a
server skip by themselves, naming what is missing, and fail instead when CI requires the
servers (``RMS_REQUIRE_SERVICES=1``). Each case runs pytest in a subprocess, as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDS_SERVERS = [
    # marked ``postgres``; its SQL reads PostgreSQL's catalogue
    "tests/feedback/test_vacuum_settings.py",
    # marked ``postgres``; an EXPLAIN of PostgreSQL's planner
    "tests/rms/test_api_objects.py::"
    "test_operations_page_reads_the_index_in_order_without_sorting_the_chain",
    # marked ``redis``; reads the length of a Redis queue
    "tests/rms/test_telemetry.py::test_queue_depth_is_the_redis_queue_length",
]


def run_pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "RMS_REQUIRE_SERVICES"}
        and not key.startswith("PYTEST_")
    }
    full_env.update(RMS_VAR_DIR=str(tmp_path / "var"), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_tests_needing_a_server_skip_naming_it_when_none_is_configured(tmp_path):
    result = run_pytest(tmp_path, *NEEDS_SERVERS)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert re.search(r"\b3 skipped\b", out) and "failed" not in out and "error" not in out, out
    assert re.search(r"SKIPPED \[2\] .*: needs PostgreSQL \(set DATABASE_URL\)", out), out
    assert re.search(r"SKIPPED \[1\] .*: needs Redis \(set REDIS_URL\)", out), out


def test_tests_needing_a_server_fail_when_ci_requires_the_servers(tmp_path):
    result = run_pytest(tmp_path, *NEEDS_SERVERS, RMS_REQUIRE_SERVICES="1")
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "skipped" not in out, out
    assert out.count("needs PostgreSQL (set DATABASE_URL)") == 2, out
    assert out.count("needs Redis (set REDIS_URL)") == 1, out


def test_a_test_asking_for_postgres_by_fixture_alone_is_treated_as_marked(tmp_path):
    """No marker, only the ``require_postgres`` fixture, and PostgreSQL-only SQL in the body:
    a skip naming PostgreSQL (or, when CI requires the servers, a failure saying the same),
    never the database's own error."""
    test_file = tmp_path / "test_unmarked.py"
    test_file.write_text(
        "from django.db import connection\n\n\n"
        "def test_reads_the_catalogue(require_postgres, db):\n"
        "    with connection.cursor() as cursor:\n"
        "        cursor.execute('SELECT relname FROM pg_class')\n"
    )
    # the project's configuration, fixtures and hooks, on a test file outside the checkout
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    result = run_pytest(
        tmp_path, "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(test_file)
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "1 skipped" in out, out
    assert "needs PostgreSQL (set DATABASE_URL)" in out, out
    required = run_pytest(
        tmp_path, "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(test_file),
        RMS_REQUIRE_SERVICES="1",
    )  # fmt: skip
    out = required.stdout + required.stderr
    assert required.returncode != 0 and "needs PostgreSQL (set DATABASE_URL)" in out, out
    assert "no such table" not in out, out


def test_ci_runs_the_readme_test_command_verbatim_on_the_embedded_default():
    """CI's embedded pass may not deselect anything: it is the README's ``make test``."""
    readme = (ROOT / "README.md").read_text()
    assert "make test   # installs and runs the whole test suite" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if "make test" in line]
    embedded = [c for c in commands if "-u DATABASE_URL" in c or c == "make test"]
    assert embedded, ci
    for command in commands:
        assert command.endswith("make test"), command
        assert "PYTEST_ARGS" not in command and not re.search(r"\s-(m|k)\s|--deselect", command)
