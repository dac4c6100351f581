"""SSRF: IPv6 forms that carry an internal IPv4 address, and deprecated site-local addresses,
are refused at registration (POST and PATCH /webhooks) and again before every attempt."""

from __future__ import annotations

import pytest

from delivery import dispatch, policy
from delivery.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db(transaction=True)

#: Each form with the internal address it reaches.
INTERNAL = [
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",  # NAT64 (RFC 6052) of 169.254.169.254
    "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    "http://[64:ff9b:1::a9fe:a9fe]/hook",  # local-use NAT64 prefix (RFC 8215)
    "http://[64:ff9b:1:a9fe:a9:fe00::]/hook",  # the same in a /48 local-use prefix
    "http://[2002:a9fe:a9fe::]/hook",  # 6to4 of 169.254.169.254
    "http://[2002:7f00:1::1]/hook",  # 6to4 of 127.0.0.1
    "http://[2002:c0a8:a::1]/hook",  # 6to4 of 192.168.0.10
    "http://[::127.0.0.1]/hook",  # IPv4-compatible (deprecated) of 127.0.0.1
    "http://[::7f00:1]/hook",  # the same, written in hex
    "http://[::a9fe:a9fe]/hook",  # IPv4-compatible of 169.254.169.254
    "http://[::ffff:169.254.169.254]/hook",  # IPv4-mapped
    "http://[::ffff:0:a9fe:a9fe]/hook",  # IPv4-translated (SIIT, RFC 2765)
    "http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook",  # Teredo, client 10.0.0.1
    "http://[2001:0:a9fe:a9fe:8000:63bf:3fff:fdd2]/hook",  # Teredo, server 169.254.169.254
    "http://[fec0::1]/hook",  # site-local (deprecated, RFC 3879)
    "http://[feff:ffff::1]/hook",  # the end of fec0::/10
]

#: The same forms carrying a public address are ordinary destinations (a NAT64 gateway is how an
#: IPv6-only host reaches an IPv4 service).
PUBLIC = [
    "http://[64:ff9b::808:808]/hook",
    "http://[2002:808:808::1]/hook",
    "http://[::ffff:8.8.8.8]/hook",
    "http://[2001:4860:4860::8888]/hook",
    "http://8.8.8.8/hook",
]


@pytest.fixture
def private_refused(settings):
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = False
    return settings


@pytest.mark.parametrize("url", INTERNAL)
def test_registration_refuses_ipv6_forms_of_internal_addresses(private_refused, admin_api, url):
    r = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert r.status_code == 400, r.content
    assert "private" in r.json()["error"]["fields"]["url"][0]
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("url", INTERNAL)
def test_patch_refuses_ipv6_forms_of_internal_addresses(private_refused, admin_api, url):
    created = admin_api.post("/api/v1/webhooks", {"url": PUBLIC[0]}, format="json")
    assert created.status_code == 201, created.content
    hook = created.json()["id"]
    r = admin_api.patch(f"/api/v1/webhooks/{hook}", {"url": url}, format="json")
    assert r.status_code == 400, r.content
    assert "private" in r.json()["error"]["fields"]["url"][0]
    assert WebhookEndpoint.objects.get().url == PUBLIC[0]


@pytest.mark.parametrize("url", PUBLIC)
def test_the_same_forms_of_public_addresses_are_accepted(private_refused, admin_api, url):
    r = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert r.status_code == 201, r.content


@pytest.mark.parametrize("url", INTERNAL)
def test_an_attempt_to_an_internal_form_is_refused_before_connecting(
    settings, admin_api, client_api, monkeypatch, url
):
    # Registered while private addresses were allowed (as in development), then the setting
    # changed: the dispatcher's own check before the attempt must refuse it.
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = True
    monkeypatch.setattr(policy, "TIMEOUT", 0.5)  # an unrefused attempt fails fast here
    created = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert created.status_code == 201, created.content
    settings.RMS_WEBHOOKS_ALLOW_PRIVATE = False
    body = {"namespace": "support", "content": "fact", "epistemic_type": "ASSERTED"}
    assert client_api.post("/api/v1/objects", body, format="json").status_code == 201
    dispatch.run_pass(budget=1)
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error.startswith("refused:"), delivery.last_error
    assert delivery.response_status is None
