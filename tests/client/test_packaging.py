"""Installing the two distributions with pip into a fresh virtual environment, as a user would:
``pip install ./clients/python`` leaves nothing in the checkout, and neither build warns about
its metadata. Marked ``pip``: it needs pip's package index (deselect with ``-m "not pip"``)."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"

pytestmark = pytest.mark.pip


def fresh_venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    return path / "bin" / "python"


def pip(python: Path, *args: str) -> str:
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-v", "--disable-pip-version-check", *args],
        cwd="/", capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    return out


def leftovers() -> set[str]:
    """What a build may leave in the checkout (the editable installs of ``make install`` keep
    their ``*.egg-info``; anything else is new)."""
    return {
        str(p.relative_to(ROOT))
        for folder in (ROOT, CLIENT, CLIENT / "src")
        for p in folder.iterdir()
        if p.name in {"build", "dist"} or p.name.endswith(".egg-info")
    }


def test_installing_the_client_leaves_the_checkout_clean_and_warns_nothing(tmp_path):
    before = leftovers()
    python = fresh_venv(tmp_path / "venv")
    out = pip(python, str(CLIENT))
    assert leftovers() == before
    assert "project.license" not in out and "deprecated" not in out.lower(), out
    check = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, rms_client; "
         "print(m.metadata('rms-client')['License-Expression'], rms_client.RMSClient.__name__)"],
        cwd="/", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.stdout.split() == ["Apache-2.0", "RMSClient"], check.stderr


def test_installing_the_service_editable_warns_nothing(tmp_path):
    before = leftovers()
    python = fresh_venv(tmp_path / "venv")
    out = pip(python, "--no-deps", "-e", str(ROOT))
    assert leftovers() == before
    assert "project.license" not in out and "deprecated" not in out.lower(), out
