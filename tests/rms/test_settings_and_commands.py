"""Settings from the environment (STYLE §11) and the create_api_client command (API.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from rms.models import ApiClient, Namespace


def settings_import(env: dict) -> subprocess.CompletedProcess:
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='rms.settings'; django.setup()"
    full = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    return subprocess.run(
        [sys.executable, "-c", code], env={**full, **env}, capture_output=True, text=True
    )


def test_bad_boolean_is_improperly_configured():
    out = settings_import({"DEBUG": "perhaps"})
    assert out.returncode != 0 and "ImproperlyConfigured" in out.stderr


def test_production_requires_a_secret():
    out = settings_import({"DEBUG": "false", "RMS_REQUIRE_SECRET": "1"})
    assert out.returncode != 0 and "SECRET_KEY" in out.stderr
    assert (
        settings_import(
            {"DEBUG": "false", "RMS_REQUIRE_SECRET": "1", "SECRET_KEY": "s" * 50}
        ).returncode
        == 0
    )


@pytest.mark.django_db
def test_create_api_client_prints_token_last_and_rotates():
    out = StringIO()
    call_command("create_api_client", "svc", "--role", "client", "--namespace", "ops", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    assert Namespace.objects.filter(name="ops").exists()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/namespaces").json()["results"][0]["name"] == "ops"
    out2 = StringIO()
    call_command("create_api_client", "svc", "--role", "operator", stdout=out2)
    rotated = out2.getvalue().strip().splitlines()[-1]
    assert rotated != token
    assert api.get("/api/v1/namespaces").status_code == 401
    assert ApiClient.objects.get(name="svc").role == "operator"


@pytest.mark.django_db
def test_create_api_client_with_password_can_log_in(client):
    call_command(
        "create_api_client", "ada", "--role", "admin", "--password", "pw-12345", stdout=StringIO()
    )
    # Through the login page: login throttling needs the request (Client.login passes none).
    response = client.post("/accounts/login/", {"username": "ada", "password": "pw-12345"})
    assert response.status_code == 302
    assert client.get("/").status_code == 200
