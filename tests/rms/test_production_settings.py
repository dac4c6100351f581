"""Production start-up, checked in real subprocesses: no SECRET_KEY (or a published one) is a
clear ImproperlyConfigured; the documented production settings (.env.example) pass
`manage.py check --deploy` with no warning and send HSTS; `make run` and the tests need none."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

#: Settings the suite's own environment may carry that would hide what these tests look at.
SCRUBBED = ("DEBUG", "SECRET_KEY", "RMS_DEVELOPMENT", "RMS_REQUIRE_SECRET", "ALLOWED_HOSTS",
            "CSRF_TRUSTED_ORIGINS", "RMS_TRUSTED_PROXIES")  # fmt: skip


def documented() -> dict[str, str]:
    """The production example of .env.example, as compose would read it."""
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in SCRUBBED and not k.startswith(("SECURE_", "DJANGO_"))
    }
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True
    )


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run(["manage.py", *args], env)


def test_a_production_start_without_a_secret_key_is_refused():
    out = manage("check", env={"DEBUG": "false"})
    assert out.returncode != 0
    assert "ImproperlyConfigured" in out.stderr and "SECRET_KEY is not set" in out.stderr


@pytest.mark.parametrize(
    "key", ["change-me-in-production", "dev-only-insecure-secret-key-do-not-use-in-production"]
)
def test_a_published_placeholder_key_is_refused(key):
    out = manage("check", env={"DEBUG": "false", "SECRET_KEY": key})
    assert out.returncode != 0 and "SECRET_KEY is a published placeholder" in out.stderr


@pytest.mark.parametrize("env", [{"RMS_DEVELOPMENT": "true"}, {"DEBUG": "true"}])
def test_development_needs_no_key(env):
    out = manage("check", env=env)
    assert out.returncode == 0, out.stderr


def test_make_run_starts_as_development():
    out = subprocess.run(["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True)
    assert "RMS_DEVELOPMENT=true" in out.stdout and "manage.py runstack" in out.stdout


def test_the_documented_production_settings_pass_check_deploy_with_no_warning():
    env = {**documented(), "SECRET_KEY": secrets.token_urlsafe(50)}
    assert env["SECURE_HSTS_SECONDS"] and env["DEBUG"] == "false"
    out = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "System check identified no issues" in out.stdout, out.stdout + out.stderr


def test_the_documented_production_settings_send_hsts_and_csp_over_https():
    env = {**documented(), "SECRET_KEY": secrets.token_urlsafe(50)}
    code = (
        "import django; django.setup();"
        "from django.test import Client;"
        "r = Client(HTTP_X_FORWARDED_PROTO='https', HTTP_HOST='rms.example.com')"
        ".get('/accounts/login/');"
        "print(r.status_code); print(r.headers.get('Strict-Transport-Security'));"
        "print(r.headers.get('Content-Security-Policy'))"
    )
    out = run(["-c", code], {**env, "DJANGO_SETTINGS_MODULE": "rms.settings"})
    assert out.returncode == 0, out.stderr
    status, hsts, csp = out.stdout.strip().splitlines()[-3:]
    assert status == "200"
    assert hsts == "max-age=31536000; includeSubDomains; preload"
    assert "default-src 'self'" in csp


def test_compose_requires_a_secret_key_and_publishes_none():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    key = compose["x-env"]["SECRET_KEY"]
    assert key.startswith("${SECRET_KEY:?"), key
    assert documented()["SECRET_KEY"] == ""  # the example holds no usable key
