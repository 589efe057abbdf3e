"""Sign-in by an authenticating proxy (HARNESS_TRUSTED_PROXY_HEADER): a request carrying
the proxy's secret signs in the user its header names (created on first sight, with no
usable password); without the secret the header is ignored, so no one reaching the app
directly can name a user; a bad configuration stops start-up naming the variable."""

from __future__ import annotations

import pytest
from django.test import Client

from agent.models import AuditEntry, User
from tests.deploy.test_config import _load_settings

pytestmark = pytest.mark.django_db

SECRET = "proxy-secret-0123456789-abcdef"


@pytest.fixture
def proxy_mode(settings):
    settings.HARNESS_TRUSTED_PROXY_HEADER = "X-Forwarded-User"
    settings.HARNESS_TRUSTED_PROXY_SECRET = SECRET
    auth = settings.MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware")
    settings.MIDDLEWARE = [*settings.MIDDLEWARE[: auth + 1],
                           "agent.web.proxy_auth.TrustedProxyUserMiddleware",
                           *settings.MIDDLEWARE[auth + 1 :]]  # fmt: skip
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS,
                                        "agent.web.proxy_auth.TrustedProxyUserBackend"]  # fmt: skip


def from_proxy(user: str | None, secret: str | None = SECRET) -> dict:
    headers = {}
    if user is not None:
        headers["HTTP_X_FORWARDED_USER"] = user
    if secret is not None:
        headers["HTTP_X_HARNESS_PROXY_SECRET"] = secret
    return headers


def test_the_proxys_user_is_signed_in_and_created_on_first_sight(proxy_mode):
    client = Client(REMOTE_ADDR="10.1.2.3")
    response = client.get("/", **from_proxy("dana@example.org"))
    assert response.status_code == 302 and response["Location"].startswith("/c/")
    dana = User.objects.get(username="dana@example.org")
    assert not dana.has_usable_password()
    page = client.get(response["Location"], **from_proxy("dana@example.org"))
    assert page.status_code == 200 and "dana@example.org" in page.content.decode()
    assert AuditEntry.objects.filter(action="sign_in", actor=dana).count() == 1
    # The session holds: the next request signs in no one anew.
    client.get(response["Location"], **from_proxy("dana@example.org"))
    assert AuditEntry.objects.filter(action="sign_in", actor=dana).count() == 1


@pytest.mark.parametrize("secret", [None, "", "proxy-secret-guess", SECRET[:-1]])
def test_without_the_proxys_secret_the_header_is_ignored(proxy_mode, secret):
    User.objects.create_superuser("root", password="pw-root-1234")
    client = Client()
    response = client.get("/", **from_proxy("root", secret))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert client.get("/api/conversations", **from_proxy("root", secret)).status_code == 401


def test_another_name_from_the_proxy_replaces_the_session_and_none_signs_out(proxy_mode):
    client = Client()
    client.get("/", **from_proxy("erin"))
    client.get("/", **from_proxy("frank"))
    assert client.session.get("_auth_user_id") == str(User.objects.get(username="frank").pk)
    client.get("/", **from_proxy(None))  # the proxy names no one: nobody is signed in
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize("name", ["", " ", "a b", "x" * 151, "evil/../name", "<b>"])
def test_an_odd_name_from_the_proxy_signs_in_no_one(proxy_mode, name):
    response = Client().get("/", **from_proxy(name))
    assert response["Location"].startswith("/accounts/login/")
    assert not User.objects.exists()


def test_the_mode_is_off_unless_configured():
    response = Client().get("/", **from_proxy("ghost"))
    assert response["Location"].startswith("/accounts/login/")
    assert not User.objects.filter(username="ghost").exists()


@pytest.mark.parametrize(("extra", "named"), [
    ({"HARNESS_TRUSTED_PROXY_HEADER": "X-Forwarded-User"}, "HARNESS_TRUSTED_PROXY_SECRET"),
    ({"HARNESS_TRUSTED_PROXY_HEADER": "X-Forwarded-User",
      "HARNESS_TRUSTED_PROXY_SECRET": "short"}, "HARNESS_TRUSTED_PROXY_SECRET"),
    ({"HARNESS_TRUSTED_PROXY_HEADER": "X Forwarded: User",
      "HARNESS_TRUSTED_PROXY_SECRET": SECRET}, "HARNESS_TRUSTED_PROXY_HEADER"),
])  # fmt: skip
def test_a_bad_proxy_configuration_stops_start_up_naming_the_variable(extra, named):
    proc = _load_settings(DJANGO_DEBUG="1", **extra)
    assert proc.returncode != 0 and named in proc.stderr
    assert SECRET not in proc.stderr


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_proxys_user_is_signed_in_too(proxy_mode):
    from django.test import AsyncClient

    def headers(secret: str) -> dict:
        return {"X-Forwarded-User": "gina", "X-Harness-Proxy-Secret": secret}

    response = await AsyncClient().get("/", headers=headers(SECRET))
    assert response.status_code == 302 and response["Location"].startswith("/c/")
    assert await User.objects.filter(username="gina").aexists()
    refused = await AsyncClient().get("/", headers=headers("wrong"))
    assert refused["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("name", ["root", "ROOT", "ops", "carol"])
def test_the_proxy_never_signs_in_as_a_local_account_it_did_not_make(proxy_mode, name):
    User.objects.create_superuser("root", password="pw-root-1234")
    User.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    User.objects.create_user("carol", password="pw-carol-1234")
    client = Client()
    response = client.get("/", **from_proxy(name))  # the attack: the proxy names "root"
    assert response["Location"].startswith("/accounts/login/")
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/", **from_proxy(name))["Location"].startswith("/admin/login/")
    assert User.objects.filter(username__iexact=name).count() == 1  # no look-alike made
    refusals = AuditEntry.objects.filter(action="sign_in_failed")
    assert {(r.target, r.details["via"], r.details["reason"]) for r in refusals} == {
        (name, "proxy", "a local account not linked to proxy sign-in")
    }
    from agent.models import ProxyIdentity

    assert not ProxyIdentity.objects.exists()


def test_an_account_the_proxy_made_is_linked_and_signs_in_again(proxy_mode):
    from agent.models import ProxyIdentity

    Client().get("/", **from_proxy("dana"))
    dana = User.objects.get(username="dana")
    assert ProxyIdentity.objects.get().user == dana
    client = Client()
    client.get("/", **from_proxy("dana"))
    assert client.session["_auth_user_id"] == str(dana.pk)
    assert User.objects.count() == 1


def test_an_account_linked_in_the_admin_signs_in_by_the_proxy(proxy_mode):
    from agent.models import ProxyIdentity

    carol = User.objects.create_user("carol", password="pw-carol-1234")
    admin_client = Client()
    admin_client.force_login(User.objects.create_superuser("root", password="pw-root-1234"))
    response = admin_client.post("/admin/agent/proxyidentity/add/", {"user": carol.pk})
    assert response.status_code == 302 and ProxyIdentity.objects.get().user == carol
    client = Client()
    client.get("/", **from_proxy("carol"))
    assert client.session["_auth_user_id"] == str(carol.pk)


def test_staff_link_only_accounts_they_may_act_as(proxy_mode):
    from django.contrib.auth.models import Permission

    from agent.models import ProxyIdentity

    root = User.objects.create_superuser("root", password="pw-root-1234")
    carol = User.objects.create_user("carol", password="pw-carol-1234")
    clerk = User.objects.create_user("clerk", password="pw-clerk-1234", is_staff=True)
    clerk.user_permissions.add(*Permission.objects.filter(
        codename__in=["add_proxyidentity", "view_proxyidentity"]))  # fmt: skip
    client = Client()
    client.force_login(clerk)
    for target in (root, carol):  # a link to the superuser would be the takeover again
        response = client.post("/admin/agent/proxyidentity/add/", {"user": target.pk})
        assert response.status_code == 200  # the form, refusing the choice
    assert not ProxyIdentity.objects.exists()
    clerk.user_permissions.add(Permission.objects.get(codename="change_user"))
    client.post("/admin/agent/proxyidentity/add/", {"user": root.pk})
    assert not ProxyIdentity.objects.exists()
    client.post("/admin/agent/proxyidentity/add/", {"user": carol.pk})
    assert ProxyIdentity.objects.get().user == carol


def test_an_inactive_linked_account_is_refused(proxy_mode):
    Client().get("/", **from_proxy("dana"))
    User.objects.filter(username="dana").update(is_active=False)
    client = Client()
    assert client.get("/", **from_proxy("dana"))["Location"].startswith("/accounts/login/")
    assert AuditEntry.objects.get(action="sign_in_failed").details["reason"] == (
        "the account is inactive"
    )


def test_the_migration_links_the_accounts_proxy_sign_in_made_before(settings):
    import importlib

    from django.apps import apps

    from agent.models import OidcIdentity, ProxyIdentity

    link = importlib.import_module("agent.migrations.0019_proxy_identity").link_proxy_made_accounts
    made = User.objects.create_user("made-by-proxy")  # (create_user: no usable password)
    User.objects.create_user("has-password", password="pw-pass-1234")
    User.objects.create_user("staff-no-password", is_staff=True)
    User.objects.create_superuser("root", password=None)
    by_sso = User.objects.create_user("by-sso")
    OidcIdentity.objects.create(user=by_sso, issuer="https://idp", subject="1")
    link(apps, None)  # proxy sign-in not configured: nothing linked
    assert not ProxyIdentity.objects.exists()
    settings.HARNESS_TRUSTED_PROXY_HEADER = "X-Forwarded-User"
    link(apps, None)
    assert [identity.user for identity in ProxyIdentity.objects.all()] == [made]


def test_refusals_lock_out_no_one(proxy_mode, settings):
    User.objects.create_superuser("root", password="pw-root-1234")
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        Client(REMOTE_ADDR="10.9.9.9").get("/", **from_proxy("root"))
    client = Client(REMOTE_ADDR="10.9.9.9")  # another of the proxy's users, same address
    assert client.get("/", **from_proxy("dana")).status_code == 302
    assert client.session["_auth_user_id"] == str(User.objects.get(username="dana").pk)
