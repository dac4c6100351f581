"""Who may see and do what: login, roles, namespace scoping, 403 on forged POSTs (API.md roles)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from rms.models import Operation
from taskruns.models import TaskRun
from tests.dashboard.conftest import login

pytestmark = pytest.mark.django_db

GET_PAGES = [
    "/",
    "/review/",
    "/sessions/",
    "/tasks/",
    "/tasks/status.json",
    "/simulations/",
    "/evidence/",
]


@pytest.mark.parametrize("path", GET_PAGES)
def test_anonymous_visitors_are_sent_to_the_login(path, namespaces):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_anonymous_object_and_session_pages_redirect_too(history):
    obj = history.objects[0]
    for path in (f"/objects/{obj.pk}/", f"/sessions/{history.sessions[0]['id']}/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_anonymous_post_changes_nothing(history):
    obj = history.objects[0]
    before = Operation.objects.count()
    response = Client().post(f"/objects/{obj.pk}/pin/", {"reason": "x"})
    assert response.status_code == 302
    assert Operation.objects.count() == before


def test_login_page_renders_and_logs_in(client_user):
    client_user.set_password("s3cret-pass")
    client_user.save()
    c = Client()
    page = c.get("/accounts/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content
    response = c.post("/accounts/login/", {"username": "cleo-client", "password": "s3cret-pass"})
    assert response.status_code == 302
    assert c.get("/").status_code == 200


@pytest.mark.parametrize("path", ["/", "/sessions/", "/evidence/"])
def test_an_account_without_a_role_gets_the_403_page(nobody, path):
    response = login(nobody).get(path)
    assert response.status_code == 403
    assert b"no dashboard role" in response.content
    assert b"create_api_client" in response.content


def test_a_superuser_without_client_is_an_admin(superuser, history):
    c = login(superuser)
    assert c.get("/review/").status_code == 200
    obj = history.objects[2]
    response = c.post(f"/objects/{obj.pk}/pin/", {"reason": "root says so"})
    assert response.status_code == 302
    op = Operation.objects.filter(target_id=obj.pk).latest("seq")
    assert (op.op_type, op.actor_id, op.actor_type) == ("PIN", "root", "HUMAN_USER")


# --- clients: own namespaces only, read-only --------------------------------------------------


def test_a_client_sees_only_its_namespaces_on_the_overview(client_user, history):
    page = login(client_user).get("/?window=all")
    assert page.status_code == 200
    names = [h.namespace.name for h in page.context["summary"]]
    assert names == ["support"]
    assert b"billing" not in page.content


@pytest.mark.parametrize("path", ["/?namespace=billing", "/sessions/?namespace=billing"])
def test_a_client_asking_for_another_namespace_gets_404(client_user, history, path):
    assert login(client_user).get(path).status_code == 404


def test_a_client_cannot_open_an_object_of_another_namespace(outsider, history):
    c = login(outsider)
    assert c.get(f"/objects/{history.objects[0].pk}/").status_code == 404
    assert c.get(f"/objects/{history.billing_object.pk}/").status_code == 200


def test_a_client_cannot_open_a_session_of_another_namespace(outsider, client_user, history):
    path = f"/sessions/{history.sessions[0]['id']}/"
    assert login(outsider).get(path).status_code == 404
    assert login(client_user).get(path).status_code == 200


def test_unknown_object_and_malformed_ids_are_404(admin, history):
    c = login(admin)
    assert c.get(f"/objects/{uuid.uuid4()}/").status_code == 404
    assert c.get("/objects/not-a-uuid/").status_code == 404
    assert c.get(f"/sessions/{uuid.uuid4()}/").status_code == 404


@pytest.mark.parametrize("path", ["/review/", "/tasks/", "/simulations/", "/tasks/status.json"])
def test_operator_pages_are_403_for_clients(client_user, path):
    assert login(client_user).get(path).status_code == 403


def test_a_client_sees_no_admin_or_operator_links(client_user, history):
    page = login(client_user).get(f"/objects/{history.objects[0].pk}/")
    assert page.status_code == 200
    assert b"Admin actions" not in page.content
    assert b'href="/review/"' not in page.content
    assert b'href="/tasks/"' not in page.content


@pytest.mark.parametrize("action", ["pin", "unpin", "deprecate"])
def test_a_client_cannot_pin_or_deprecate(client_user, history, action):
    obj = history.objects[0]
    before = Operation.objects.filter(target_id=obj.pk).count()
    response = login(client_user).post(f"/objects/{obj.pk}/{action}/", {"reason": "forged"})
    assert response.status_code == 403
    assert Operation.objects.filter(target_id=obj.pk).count() == before


# --- operators: read everything, start read-only tasks, no admin actions -----------------------


def test_an_operator_sees_every_namespace(operator, history):
    page = login(operator).get("/?window=all")
    assert {h.namespace.name for h in page.context["summary"]} == {"support", "billing"}


@pytest.mark.parametrize("action", ["pin", "unpin", "deprecate"])
def test_an_operator_forging_an_admin_post_gets_403(operator, history, action):
    obj = history.objects[0]
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    c.get(f"/objects/{obj.pk}/")  # a real page visit sets the CSRF cookie
    token = c.cookies["csrftoken"].value
    before = Operation.objects.filter(target_id=obj.pk).count()
    response = c.post(
        f"/objects/{obj.pk}/{action}/",
        {"reason": "forged", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 403
    assert Operation.objects.filter(target_id=obj.pk).count() == before


def test_an_operator_cannot_bulk_deprecate(operator, history):
    ids = [str(o.pk) for o in history.objects]
    response = login(operator).post("/review/deprecate/", {"ids": ids, "reason": "forged"})
    assert response.status_code == 403
    assert not Operation.objects.filter(op_type="EPISTEMIC_TRANSITION").exists()


def test_an_operator_sees_no_admin_controls(operator, history):
    c = login(operator)
    page = c.get(f"/objects/{history.objects[0].pk}/")
    assert b"Admin actions" not in page.content
    assert b"/pin/" not in page.content
    queue = c.get("/review/?namespace=support")
    assert b"Deprecate selected" not in queue.content


def test_an_operator_cannot_start_admin_only_tasks(operator, namespaces):
    response = login(operator).post("/tasks/start/", {"kind": "ignored_sweep"})
    assert response.status_code == 403
    assert not TaskRun.objects.exists()


def test_an_operator_is_offered_only_the_kinds_it_may_start(operator, admin, namespaces):
    offered = [k["kind"] for k in login(operator).get("/tasks/").context["kinds"]]
    assert "ignored_sweep" not in offered and "rebuild_aggregates" not in offered
    assert {"verify_replay", "stability_simulation", "benchmark_suite"} <= set(offered)
    offered = [k["kind"] for k in login(admin).get("/tasks/").context["kinds"]]
    assert {"ignored_sweep", "rebuild_aggregates"} <= set(offered)


def test_post_endpoints_refuse_get(admin, history):
    obj = history.objects[0]
    c = login(admin)
    for path in (f"/objects/{obj.pk}/pin/", "/review/deprecate/", "/tasks/start/"):
        assert c.get(path).status_code == 405


def test_csrf_is_enforced_on_dashboard_posts(admin, history):
    obj = history.objects[0]
    c = Client(enforce_csrf_checks=True)
    c.force_login(admin)
    before = Operation.objects.filter(target_id=obj.pk).count()
    refused = c.post(f"/objects/{obj.pk}/pin/", {"reason": "no token"})
    assert refused.status_code == 403
    assert b"could not be checked" in refused.content
    assert Operation.objects.filter(target_id=obj.pk).count() == before

    c.get(f"/objects/{obj.pk}/")
    token = c.cookies["csrftoken"].value
    accepted = c.post(
        f"/objects/{obj.pk}/pin/", {"reason": "with token", "csrfmiddlewaretoken": token}
    )
    assert accepted.status_code == 302
    assert Operation.objects.filter(target_id=obj.pk).count() == before + 1
