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
