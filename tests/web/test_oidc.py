"""Single sign-on by OpenID Connect (HARNESS_OIDC_*), against a real OpenID provider on
127.0.0.1 written here: its authorization endpoint hands out codes, its token endpoint
checks the client secret, the redirect URI and PKCE and answers an ID token signed RS256,
its JWKS and userinfo endpoints answer what a provider would. The app's real views, the
real mozilla-django-oidc code and real HTTP between them; nothing mocked.

Covered: the whole flow (state, nonce, PKCE; user made on first sign-in with no usable
password; audit), a second sign-in reuses the account, a claim equal to a local account's
name gets an account of its own, a wrong or replayed state / bad signature / wrong nonce /
wrong audience / another subject's user info / an expired token / the provider's error /
an inactive account sign in no one (and are audited), logout, password sign-in beside it,
404 when not configured, and a half configuration stops start-up naming what is missing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from django.test import Client

from agent.models import AuditEntry, OidcIdentity, User
from agent.web.oidc import safe_username
from harness_site.sso import oidc_settings
from tests.deploy.test_config import REPO, _settings_env

pytestmark = pytest.mark.django_db

CLIENT_ID = "harness-test"
CLIENT_SECRET = "client-secret-0123456789-abcdef"
CALLBACK = "http://testserver/oidc/callback/"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(number: int) -> str:
    return b64url(number.to_bytes((number.bit_length() + 7) // 8, "big"))


def signed_jwt(claims: dict, key: rsa.RSAPrivateKey, kid: str) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


class Provider:
    """A small OpenID provider. ``user`` is who signs in at its authorization endpoint;
    ``tamper`` makes it misbehave in one way (the tests of refusals)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "key-1"
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), ProviderHandler)
        self.server.provider = self
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.issuer = self.url
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.reset()

    def reset(self) -> None:
        self.user = {"sub": "u-1001", "preferred_username": "dana", "email": "dana@example.org"}
        self.tamper: str | None = None
        self.codes: dict[str, dict] = {}
        self.tokens: dict[str, dict] = {}
        self.token_requests: list[dict] = []

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def env(self) -> dict[str, str]:
        return {
            "HARNESS_OIDC_CLIENT_ID": CLIENT_ID,
            "HARNESS_OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "HARNESS_OIDC_AUTHORIZATION_ENDPOINT": f"{self.url}/authorize",
            "HARNESS_OIDC_TOKEN_ENDPOINT": f"{self.url}/token",
            "HARNESS_OIDC_USERINFO_ENDPOINT": f"{self.url}/userinfo",
            "HARNESS_OIDC_JWKS_ENDPOINT": f"{self.url}/jwks",
            "HARNESS_OIDC_BUTTON": "Example SSO",
        }

    # -- the endpoints -------------------------------------------------------------------
    def authorize(self, query: dict[str, str]) -> tuple[int, dict, str]:
        """The user is signed in at the provider already: straight back with a code."""
        if (query.get("client_id") != CLIENT_ID or query.get("response_type") != "code"
                or "openid" not in query.get("scope", "").split()
                or query.get("code_challenge_method") != "S256"):  # fmt: skip
            return 400, {}, "bad authorization request"
        code = secrets.token_urlsafe(16)
        self.codes[code] = {**query, "user": dict(self.user)}
        back = {"code": code, "state": query["state"]}
        return 302, {"Location": f"{query['redirect_uri']}?{urlencode(back)}"}, ""

    def token(self, form: dict[str, str]) -> tuple[int, dict, str]:
        self.token_requests.append(form)
        grant = self.codes.pop(form.get("code", ""), None)  # a code is good once
        challenge = b64url(hashlib.sha256(form.get("code_verifier", "").encode()).digest())
        if (grant is None or form.get("grant_type") != "authorization_code"
                or form.get("client_id") != CLIENT_ID
                or form.get("client_secret") != CLIENT_SECRET
                or form.get("redirect_uri") != grant["redirect_uri"]
                or challenge != grant["code_challenge"]):  # fmt: skip
            return 400, {"Content-Type": "application/json"}, '{"error": "invalid_grant"}'
        user = grant["user"]
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": user["sub"], "aud": CLIENT_ID, "iat": now,
                  "exp": now + 300, "nonce": grant["nonce"]}  # fmt: skip
        key = self.key
        if self.tamper == "signature":
            key = self.other_key  # the same kid, another key
        elif self.tamper == "nonce":
            claims["nonce"] = "not-the-nonce-that-was-sent"
        elif self.tamper == "audience":
            claims["aud"] = "another-client"
        elif self.tamper == "expired":
            claims.update(iat=now - 600, exp=now - 300)
        access_token = secrets.token_urlsafe(24)
        self.tokens[access_token] = user
        answer = {"access_token": access_token, "token_type": "Bearer", "expires_in": 300,
                  "id_token": signed_jwt(claims, key, self.kid)}  # fmt: skip
        return 200, {"Content-Type": "application/json"}, json.dumps(answer)

    def userinfo(self, authorization: str) -> tuple[int, dict, str]:
        user = self.tokens.get(authorization.removeprefix("Bearer "))
        if user is None:
            return 401, {}, ""
        if self.tamper == "userinfo_sub":
            user = {**user, "sub": "someone-else"}
        return 200, {"Content-Type": "application/json"}, json.dumps(user)

    def jwks(self) -> tuple[int, dict, str]:
        numbers = self.key.public_key().public_numbers()
        key = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
               "n": uint(numbers.n), "e": uint(numbers.e)}  # fmt: skip
        return 200, {"Content-Type": "application/json"}, json.dumps({"keys": [key]})


class ProviderHandler(BaseHTTPRequestHandler):
    def _answer(self, status: int, headers: dict, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlsplit(self.path)
        provider = self.server.provider
        if url.path == "/authorize":
            query = {name: values[0] for name, values in parse_qs(url.query).items()}
            return self._answer(*provider.authorize(query))
        if url.path == "/userinfo":
            return self._answer(*provider.userinfo(self.headers.get("Authorization", "")))
        if url.path == "/jwks":
            return self._answer(*provider.jwks())
        return self._answer(404, {}, "")

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        form = {name: values[0] for name, values in parse_qs(body).items()}
        if urlsplit(self.path).path == "/token":
            return self._answer(*self.server.provider.token(form))
        return self._answer(404, {}, "")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def provider():
    running = Provider()
    yield running
    running.stop()


@pytest.fixture
def oidc(provider, settings, monkeypatch):
    """Single sign-on on, with exactly the settings a server makes of the variables."""
    provider.reset()
    for name, value in provider.env().items():
        monkeypatch.setenv(name, value)
    for name, value in oidc_settings(debug=True).items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS,
                                        "agent.web.oidc.OIDCBackend"]  # fmt: skip
    return provider


def at_provider(location: str) -> str:
    """The browser at the provider's authorization endpoint: where it is sent back to."""
    url = urlsplit(location)
    connection = HTTPConnection(url.hostname, url.port, timeout=10)
    connection.request("GET", f"{url.path}?{url.query}")
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.status == 302, response.status
    return response.getheader("Location")


def start(client: Client, provider: Provider, query: str = "") -> str:
    """From the app's sign-in link to the provider and back: the callback URL."""
    response = client.get(f"/oidc/authenticate/{query}")
    assert response.status_code == 302
    assert response["Location"].startswith(f"{provider.url}/authorize?")
    return at_provider(response["Location"])


def signed_in(client: Client) -> User | None:
    user_id = client.session.get("_auth_user_id")
    return User.objects.get(pk=user_id) if user_id else None


def entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("time", "pk"))


def test_the_whole_flow_signs_in_and_makes_the_user(oidc):
    client = Client(REMOTE_ADDR="192.0.2.40")
    page = client.get("/accounts/login/?next=/files/").content.decode()
    assert "Sign in with Example SSO" in page
    assert 'href="/oidc/authenticate/?next=/files/"' in page
    assert 'name="password"' in page  # the password form stays

    response = client.get("/oidc/authenticate/?next=/files/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"http://{location.netloc}{location.path}" == f"{oidc.url}/authorize"
    query = parse_qs(location.query)
    assert query["client_id"] == [CLIENT_ID] and query["response_type"] == ["code"]
    assert query["redirect_uri"] == [CALLBACK]
    assert set(query["scope"][0].split()) >= {"openid", "email", "profile"}
    assert len(query["state"][0]) >= 32 and len(query["nonce"][0]) >= 32
    assert query["code_challenge_method"] == ["S256"]
    assert signed_in(client) is None

    back = at_provider(response["Location"])
    assert back.startswith(CALLBACK) and parse_qs(urlsplit(back).query)["state"] == query["state"]
    done = client.get(back)
    assert done.status_code == 302 and done["Location"] == "/files/"

    dana = signed_in(client)
    assert dana is not None and dana.username == "dana" and dana.email == "dana@example.org"
    assert not dana.has_usable_password() and not dana.is_staff
    identity = OidcIdentity.objects.get(user=dana)
    assert (identity.issuer, identity.subject) == (oidc.issuer, "u-1001")
    # The token request carried the secret and the PKCE verifier (the provider checks them).
    [token_request] = oidc.token_requests
    assert token_request["client_secret"] == CLIENT_SECRET and token_request["code_verifier"]
    [entry] = entries("sign_in")
    assert (entry.actor, entry.ip, entry.details) == (dana, "192.0.2.40", {"via": "oidc"})
    assert not entries("sign_in_failed")
    assert CLIENT_SECRET not in json.dumps(list(AuditEntry.objects.values()), default=str)

    # Signed in for real: the app's pages, then logout signs out.
    assert client.get("/files/").status_code == 200
    client.post("/accounts/logout/")
    assert signed_in(client) is None
    assert client.get("/files/").status_code == 302
    assert [e.actor for e in entries("sign_out")] == [dana]


def test_a_second_sign_in_reuses_the_account(oidc):
    client = Client()
    client.get(start(client, oidc))
    first = signed_in(client)
    oidc.user["preferred_username"] = "dana.renamed"  # names change; the subject does not
    again = Client()
    again.get(start(again, oidc))
    assert signed_in(again) == first
    assert User.objects.count() == 1 and OidcIdentity.objects.count() == 1
    assert len(entries("sign_in")) == 2


def test_a_claim_equal_to_a_local_account_gets_an_account_of_its_own(oidc):
    root = User.objects.create_superuser("root", password="pw-root-1234")
    oidc.user = {"sub": "u-evil", "preferred_username": "ROOT", "email": "x@example.org"}
    client = Client()
    client.get(start(client, oidc))
    user = signed_in(client)
    assert user != root and user.username == "ROOT-2" and not user.is_superuser
    # Another subject with the same name: another account again.
    oidc.user = {"sub": "u-evil-2", "preferred_username": "root"}
    other = Client()
    other.get(start(other, oidc))
    assert signed_in(other).username == "root-3"


@pytest.mark.parametrize(("claims", "expected"), [
    ({"preferred_username": "Dana Smith/../x"}, "Dana-Smith-..-x"),
    ({"preferred_username": "", "email": "erin@example.org"}, "erin@example.org"),
    ({"email": "frank@example.org"}, "frank@example.org"),
    ({"preferred_username": "Zoë <b>"}, "Zo-b"),
    ({"preferred_username": "ｇｉｎａ"}, "gina"),  # full-width letters: NFKC
    ({"preferred_username": "x" * 300}, "x" * 150),
    ({"preferred_username": "///", "email": 7}, "user"),
])  # fmt: skip
def test_names_from_claims_are_made_safe(oidc, claims, expected):
    oidc.user = {"sub": f"u-{expected[:20]}", **claims}
    client = Client()
    client.get(start(client, oidc))
    assert signed_in(client).username == expected


def test_safe_username():
    assert safe_username("  ada.l@x+y-z_1 ") == "ada.l@x+y-z_1"
    assert safe_username(None) == safe_username("...") == ""


def refused(client: Client, response, reason: str) -> AuditEntry:
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?sso=failed"
    assert signed_in(client) is None
    assert client.get("/files/").status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "Single sign-on did not sign you in" in page and 'role="alert"' in page
    [entry] = entries("sign_in_failed")
    assert entry.details["via"] == "oidc" and reason in entry.details["reason"], entry.details
    assert not entries("sign_in")
    return entry


def with_state(url: str, state: str) -> str:
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    return f"{parts.path}?{urlencode({**query, 'state': state})}"


def test_a_wrong_state_signs_in_no_one(oidc):
    client = Client()
    back = start(client, oidc)
    response = client.get(with_state(back, "x" * 32))
    refused(client, response, "state")
    assert not User.objects.exists() and not oidc.token_requests  # the code was not used


def test_a_callback_from_another_browser_or_used_twice_signs_in_no_one(oidc):
    victim = Client()
    back = start(victim, oidc)
    attacker = Client()
    refused(attacker, attacker.get(back), "state")  # the state is in the victim's session
    victim.get(back)
    dana = signed_in(victim)
    assert dana is not None
    replay = victim.get(back)  # the same state again, in the same session: used already
    assert replay["Location"] == "/accounts/login/?sso=failed"
    failures = entries("sign_in_failed")
    assert len(failures) == 2 and "state" in failures[-1].details["reason"]
    assert len(oidc.token_requests) == 1  # the code never went to the provider again
    assert signed_in(victim) == dana  # a failed callback does not sign out who was in


@pytest.mark.parametrize(("tamper", "reason"), [
    ("signature", "verification failed"),
    ("nonce", "Nonce"),
    ("audience", "another client"),
    ("userinfo_sub", "not about the token's subject"),
    ("expired", "ExpiredSignatureError"),
])  # fmt: skip
def test_a_bad_token_signs_in_no_one(oidc, tamper, reason):
    oidc.tamper = tamper
    client = Client()
    response = client.get(start(client, oidc))
    refused(client, response, reason)
    assert not User.objects.exists() and not OidcIdentity.objects.exists()


def test_the_providers_error_and_a_bad_code_sign_in_no_one(oidc):
    client = Client()
    back = start(client, oidc)
    state = parse_qs(urlsplit(back).query)["state"][0]
    refused(client, client.get(f"/oidc/callback/?error=access_denied&state={state}"),
            "access_denied")  # fmt: skip
    AuditEntry.objects.all().delete()
    back = start(client, oidc)
    state = parse_qs(urlsplit(back).query)["state"][0]
    refused(client, client.get(f"/oidc/callback/?code=made-up&state={state}"), "HTTP 400")


def test_an_inactive_account_cannot_sign_in_and_its_session_ends(oidc):
    client = Client()
    client.get(start(client, oidc))
    dana = signed_in(client)
    assert client.get("/files/").status_code == 200
    User.objects.filter(pk=dana.pk).update(is_active=False)
    assert client.get("/files/").status_code == 302  # the session signs in no one now
    AuditEntry.objects.all().delete()
    again = Client()
    entry = refused(again, again.get(start(again, oidc)), "inactive")
    assert entry.target == "dana"


def test_password_sign_in_still_works_and_never_reaches_the_provider(oidc):
    User.objects.create_user("olga", password="pw-olga-secret-1234")
    client = Client()
    response = client.post("/accounts/login/?code=x&state=y",
                           {"username": "olga", "password": "pw-olga-secret-1234"})  # fmt: skip
    assert response.status_code == 302 and signed_in(client).username == "olga"
    assert not oidc.token_requests
    assert entries("sign_in")[0].details == {}


def test_off_unless_configured():
    client = Client()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    page = client.get("/accounts/login/").content.decode()
    assert "Sign in with" not in page and "/oidc/" not in page and 'name="password"' in page


# -- configuration -----------------------------------------------------------------------
SHOW = ("import harness_site.settings as s; "
        "print(s.HARNESS_OIDC, 'mozilla_django_oidc' in s.INSTALLED_APPS, "
        "s.AUTHENTICATION_BACKENDS[-1], s.OIDC_OP_USER_ENDPOINT, s.OIDC_RP_SIGN_ALGO, "
        "s.OIDC_RP_CLIENT_SECRET == 'from-a-file-0123456789')")  # fmt: skip


def load_settings(code: str = SHOW, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_settings_env(**extra),
                          capture_output=True, text=True)  # fmt: skip


def full_env(**changes) -> dict[str, str]:
    env = {
        "DJANGO_DEBUG": "1",
        "HARNESS_OIDC_CLIENT_ID": CLIENT_ID,
        "HARNESS_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "HARNESS_OIDC_AUTHORIZATION_ENDPOINT": "https://id.example/authorize",
        "HARNESS_OIDC_TOKEN_ENDPOINT": "https://id.example/token",
        "HARNESS_OIDC_USERINFO_ENDPOINT": "https://id.example/userinfo",
        "HARNESS_OIDC_JWKS_ENDPOINT": "https://id.example/jwks",
    }
    env.update(changes)
    return {name: value for name, value in env.items() if value is not None}


def test_a_full_configuration_turns_it_on_and_the_secret_may_be_a_file(tmp_path):
    secret = tmp_path / "oidc_secret"
    secret.write_text("from-a-file-0123456789\n")
    proc = load_settings(**full_env(HARNESS_OIDC_CLIENT_SECRET=None,
                                    HARNESS_OIDC_CLIENT_SECRET_FILE=str(secret)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "agent.web.oidc.OIDCBackend",
                                   "https://id.example/userinfo", "RS256", "True"]  # fmt: skip
    off = load_settings("import harness_site.settings as s; print(s.HARNESS_OIDC, "
                        "'mozilla_django_oidc' in s.INSTALLED_APPS)", DJANGO_DEBUG="1")  # fmt: skip
    assert off.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(("changes", "named"), [
    ({"HARNESS_OIDC_JWKS_ENDPOINT": None}, "HARNESS_OIDC_JWKS_ENDPOINT missing"),
    ({"HARNESS_OIDC_CLIENT_SECRET": None}, "HARNESS_OIDC_CLIENT_SECRET missing"),
    ({"HARNESS_OIDC_CLIENT_ID": None, "HARNESS_OIDC_TOKEN_ENDPOINT": None},
     "HARNESS_OIDC_CLIENT_ID, HARNESS_OIDC_TOKEN_ENDPOINT missing"),
    ({"HARNESS_OIDC_TOKEN_ENDPOINT": "id.example/token"}, "HARNESS_OIDC_TOKEN_ENDPOINT"),
    ({"HARNESS_OIDC_SIGN_ALGO": "HS256"}, "HARNESS_OIDC_SIGN_ALGO"),
    ({"HARNESS_OIDC_USERNAME_CLAIM": "a claim"}, "HARNESS_OIDC_USERNAME_CLAIM"),
    ({"HARNESS_OIDC_CLIENT_SECRET_FILE": "/nonexistent"}, "HARNESS_OIDC_CLIENT_SECRET"),
])  # fmt: skip
def test_a_half_or_bad_configuration_stops_start_up_naming_the_variable(changes, named):
    proc = load_settings(**full_env(**changes))
    assert proc.returncode != 0 and "ImproperlyConfigured" in proc.stderr
    assert named in proc.stderr and CLIENT_SECRET not in proc.stderr


def test_only_the_button_label_set_is_a_half_configuration_too():
    proc = load_settings(DJANGO_DEBUG="1", HARNESS_OIDC_BUTTON="Okta")
    assert proc.returncode != 0 and "HARNESS_OIDC_CLIENT_ID" in proc.stderr


def test_production_wants_https_endpoints():
    production = {"DJANGO_DEBUG": None, "DJANGO_SECRET_KEY": "k-" + "abcdefghij" * 5,
                  "DJANGO_ALLOWED_HOSTS": "harness.example"}  # fmt: skip
    plain = full_env(**production, HARNESS_OIDC_USERINFO_ENDPOINT="http://id.example/userinfo")
    proc = load_settings(**plain)
    assert proc.returncode != 0
    assert "HARNESS_OIDC_USERINFO_ENDPOINT must be an https URL" in proc.stderr
    assert load_settings(**full_env(**production)).returncode == 0
