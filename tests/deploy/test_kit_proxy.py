"""The kit's nginx site in front of the kit's Daphne unit, live: HTTPS is recognised from
X-Forwarded-Proto (no redirect loop), the throttles see the client's address rather than
the proxy's (X-Forwarded-For + --proxy-headers), and the page's WebSocket goes through.
Floods: slow unauthenticated uploads are held and cut off by nginx, never by Daphne; one
address may have only so many requests in progress; a user's socket past
HARNESS_SOCKETS_PER_USER is closed with 4429 through the real stack."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import json
import re
import socket
import ssl
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.server.staticfiles import minified
from testkit.live import collect_static, free_port
from tests.conftest import REPO
from tests.deploy.test_kit import DEPLOY, HOST, UnitServer, _nginx_config, _tool

MB = 1024 * 1024
PROXY_ADDRESS = "127.0.0.2"  # nginx reaches Daphne from here; the client is 127.0.0.1


@pytest.fixture(scope="module")
def kit_daphne(tmp_path_factory):
    """The kit's Daphne unit with the kit's settings and a user ``ann``, shared by the
    module's sites that add no settings of their own (its migrate unit and start-up take
    seconds; each test still gets an nginx of its own)."""
    server = _unit_server(tmp_path_factory.mktemp("kit-daphne"))
    yield server
    server.stop()


def _unit_server(root: Path, **env: str) -> UnitServer:
    server = UnitServer(root, **env)
    try:
        server.probe()
        server.manage("shell", "-c", "from agent.models import User; "
                      "User.objects.create_user('ann', password='pw-ann-12345')")  # fmt: skip
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture
def proxy(tmp_path, kit_daphne):
    """``proxy(edits, **env)``: the kit's site in front of the kit's Daphne unit (a unit of
    its own when ``env`` adds settings), the site's text changed by ``edits`` (pairs of old
    and new text: shorter timeouts, smaller limits); returns the Daphne server and nginx's
    port. What the test started stops after it."""
    nginx, running = _tool("nginx"), []

    def start(edits: tuple[tuple[str, str], ...] = (), **env: str) -> tuple[UnitServer, int]:
        server = kit_daphne
        if env:
            server = _unit_server(tmp_path, **env)
            running.append(server.stop)
        port = free_port()
        config = _nginx_config(tmp_path, _site_for_test(server.port, port, edits))
        errors = tmp_path / "nginx.stderr"
        process = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(config), "-g",
                                    "daemon off;"], stderr=errors.open("wb"))  # fmt: skip
        running.append(lambda: (process.terminate(), process.wait(timeout=10)))
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, errors.read_text()
            time.sleep(0.05)
        return server, port

    try:
        yield start
    finally:
        for stop in reversed(running):
            stop()


@pytest.fixture
def proxied(proxy):
    return proxy()


def _site_for_test(daphne_port: int, port: int, edits: tuple[tuple[str, str], ...] = ()) -> str:
    """The kit's site on a test port, in front of one Daphne, without IPv6 listeners, and
    reaching Daphne from its own address (as a proxy on another host would); then
    ``edits``, each of which must find its text."""
    site = (DEPLOY / "nginx" / "harness.conf").read_text()
    for old, new in edits:
        assert old in site, old
        site = site.replace(old, new)
    site = re.sub(r"server 127\.0\.0\.1:800\d[^;]*;", f"server 127.0.0.1:{daphne_port};", site)
    site = site.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{port} ssl http2;")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{free_port()};")
    site = re.sub(r"\n\s*listen \[::\]:\d+[^;]*;", "", site)
    bind = f"proxy_http_version 1.1;\n    proxy_bind {PROXY_ADDRESS};"
    return site.replace("proxy_http_version 1.1;", bind)


def _tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the test's throwaway certificate
    return context


class Browser:
    """Just enough of one: HTTPS through the proxy, with cookies."""

    def __init__(self, port: int):
        self.port, self.cookies = port, {}
        # As a browser on port 443 would say it: nginx passes $host, which has no port.
        self.origin = f"https://{HOST}"

    def request(self, method: str, path: str, form: dict | None = None):
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=_tls(),
                                                 timeout=30)  # fmt: skip
        headers = {"Host": HOST, "Origin": self.origin,
                   "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}  # fmt: skip
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        for header in response.headers.get_all("Set-Cookie") or ():
            name, _, rest = header.partition("=")
            self.cookies[name] = rest.split(";", 1)[0]
        connection.close()
        return response, text

    def sign_in(self, password: str):
        response, page = self.request("GET", "/accounts/login/")
        assert response.status == 200, (response.status, response.getheader("Location"))
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
        return self.request("POST", "/accounts/login/", {
            "username": "ann", "password": password, "csrfmiddlewaretoken": token})  # fmt: skip


def test_through_the_site_the_app_sees_https_and_the_clients_address(proxied):
    server, port = proxied
    browser = Browser(port)
    response, page = browser.sign_in("wrong-password")  # https: no redirect to itself
    assert response.status == 200, (browser.cookies, page[-1500:])
    seen = server.manage("shell", "-c", "from axes.models import AccessAttempt; "
                         "print(sorted(AccessAttempt.objects.values_list('ip_address', "
                         "flat=True)))")  # fmt: skip
    # The client's address, not the proxy's 127.0.0.2.
    assert seen.strip().splitlines()[-1] == "['127.0.0.1']", seen


async def test_the_pages_websocket_goes_through_the_site(proxied):
    _, port = proxied
    browser = Browser(port)
    response, _ = await asyncio.to_thread(browser.sign_in, "pw-ann-12345")
    assert response.status == 302 and "sessionid" in browser.cookies
    response, _ = await asyncio.to_thread(browser.request, "GET", "/")
    conversation = response.getheader("Location").rstrip("/").rsplit("/", 1)[1]
    async with connect(f"wss://{HOST}:{port}/ws/c/{conversation}/", host="127.0.0.1",
                       port=port, ssl=_tls(), origin=browser.origin,
                       additional_headers={"Cookie": f"sessionid={browser.cookies['sessionid']}"},
                       ) as ws:  # fmt: skip
        await ws.send('{"action": "sync", "after": 0}')
        reply = await asyncio.wait_for(ws.recv(), 10)
    assert reply  # the catch-up came back over the upgraded connection


# -- Connections and floods (docs/DEPLOY.md) ---------------------------------------------

SLOW_BODY = 2  # seconds: the tests' client_body_timeout (the kit's is 10 s)
SHORT_BODY_TIMEOUT = ("client_body_timeout 10s;", f"client_body_timeout {SLOW_BODY}s;")


def _daphne_connections(port: int) -> int:
    """TCP connections established to Daphne's port now (the kernel's table)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        count += int(local.rsplit(":", 1)[1], 16) == port and state == "01"
    return count


def _slow_upload(port: int) -> ssl.SSLSocket:
    """An unauthenticated upload that sends its headers and a little of its body, then
    stalls: a slowloris on the body."""
    tls = _tls().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                             server_hostname=HOST)  # fmt: skip
    tls.sendall(f"PUT /api/files/flood.bin HTTP/1.1\r\nHost: {HOST}\r\n"
                "Content-Type: application/octet-stream\r\nContent-Length: 1000000\r\n\r\n"
                .encode() + b"x" * 1000)  # fmt: skip
    return tls


def _answer(tls: ssl.SSLSocket, timeout: float) -> bytes:
    """What the proxy sends before it closes the connection (fails if it stays open)."""
    tls.settimeout(timeout)
    received = b""
    try:
        while chunk := tls.recv(4096):
            received += chunk
    except ssl.SSLError:  # closed without TLS's goodbye: closed all the same
        pass
    finally:
        tls.close()
    return received


def _healthz(port: int) -> tuple[int, float]:
    """GET /healthz through the site (the proxy's own host may): its status and time."""
    started = time.monotonic()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=_tls(), timeout=10)
    connection.request("GET", "/healthz", headers={"Host": HOST})
    status = connection.getresponse().status
    connection.close()
    return status, time.monotonic() - started


def test_slow_unauthenticated_uploads_are_cut_off_by_nginx_and_never_hold_daphne(proxy):
    server, port = proxy((SHORT_BODY_TIMEOUT,))
    before = _daphne_connections(server.port)
    flood = [_slow_upload(port) for _ in range(50)]
    started = time.monotonic()  # (after the handshakes: a loaded machine takes seconds)
    time.sleep(0.5)  # nginx has read every request's headers and waits for the bodies
    # nginx holds them all: not one reaches Daphne, which answers others at once.
    assert _daphne_connections(server.port) == before
    status, took = _healthz(port)
    assert status == 200 and took < 2, (status, took)
    # Each is cut off by the body timeout (408, or closed), before any reached Daphne.
    for tls in flood:
        answer = _answer(tls, SLOW_BODY + 5)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert time.monotonic() - started < SLOW_BODY + 8
    assert "/api/files/flood.bin" not in server.log.read_text()


def test_a_body_declared_over_its_limit_is_refused_by_nginx_unread(proxied):
    """Signed in or not, a body whose declared length passes its path's limit is answered
    413 after a little of it, and never reaches Daphne (which would read it whole)."""
    server, port = proxied
    for method, path in (("POST", "/accounts/login/"), ("POST", "/api/conversations"),
                         ("PUT", "/api/files/huge.bin")):  # fmt: skip
        tls = _tls().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                 server_hostname=HOST)  # fmt: skip
        tls.sendall(f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    f"Content-Length: {50 * MB}\r\n\r\n".encode())  # fmt: skip
        with contextlib.suppress(OSError):  # (refused already: the rest never needs sending)
            tls.sendall(b"a" * 65536)
        tls.settimeout(10)
        answer = b""
        while b"over the limit" not in answer and (chunk := tls.recv(4096)):
            answer += chunk
        tls.close()
        assert answer.startswith(b"HTTP/1.1 413"), (path, answer[:200])
        # The API's error shape where the API or the page's uploads are asked, text for pages.
        json_answer = path.startswith("/api/")
        assert (b"Content-Type: application/json" in answer) is json_answer, answer
        assert (b'"error": "too_large"' in answer) is json_answer, answer
    log = server.log.read_text()
    assert "/api/conversations" not in log and "huge.bin" not in log


def test_the_site_serves_the_collected_static_files_gzipped_and_cached_for_good(proxy):
    """From the directory collectstatic fills, not through Daphne; a name nginx does not
    have goes on to Daphne."""
    server, port = proxy((("root /srv/harness/app/public;", f"root {REPO / 'public'};"),))
    collect_static(server)
    manifest = json.loads((REPO / "public" / "static" / "staticfiles.json").read_text())
    hashed = manifest["paths"]["harness.js"]
    for path, immutable in ((f"/static/{hashed}", True), ("/static/harness.js", False)):
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=_tls(), timeout=10)
        connection.request("GET", path, headers={"Host": HOST, "Accept-Encoding": "gzip"})
        response = connection.getresponse()
        body = response.read()
        connection.close()
        assert response.status == 200, path
        assert response.getheader("Content-Encoding") == "gzip", path
        source = (REPO / "static" / "harness.js").read_text()
        assert gzip.decompress(body).decode() == minified("harness.js", source)
        cache = response.getheader("Cache-Control")
        assert cache == ("max-age=315360000, public, immutable" if immutable
                         else "max-age=0, public"), (path, cache)  # fmt: skip
        assert response.getheader("X-Content-Type-Options") == "nosniff"
        # nginx's answer: WhiteNoise (Daphne) would have added this header.
        assert response.getheader("Access-Control-Allow-Origin") is None
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=_tls(), timeout=10)
    connection.request("GET", "/static/no-such-file.css", headers={"Host": HOST})
    assert connection.getresponse().status == 404
    assert "Not Found: /static/no-such-file.css" in server.log.read_text()


def test_one_address_may_have_only_so_many_requests_in_progress(proxy):
    _, port = proxy((SHORT_BODY_TIMEOUT, ("limit_conn harness_conn 128;",
                                          "limit_conn harness_conn 5;")))  # fmt: skip
    held = [_slow_upload(port) for _ in range(5)]
    time.sleep(0.3)
    assert _healthz(port)[0] == 429  # the sixth at once, from the same address
    for tls in held:
        _answer(tls, SLOW_BODY + 5)
    assert _healthz(port)[0] == 200  # once they were cut off


async def test_past_its_users_bound_a_socket_through_the_site_is_closed_with_4429(proxy):
    _, port = await asyncio.to_thread(proxy, HARNESS_SOCKETS_PER_USER="2")
    browser = Browser(port)
    response, _ = await asyncio.to_thread(browser.sign_in, "pw-ann-12345")
    assert response.status == 302
    response, _ = await asyncio.to_thread(browser.request, "GET", "/")
    conversation = response.getheader("Location").rstrip("/").rsplit("/", 1)[1]

    cookie = {"Cookie": f"sessionid={browser.cookies['sessionid']}"}

    def open_socket():
        return connect(f"wss://{HOST}:{port}/ws/c/{conversation}/", host="127.0.0.1",
                       port=port, ssl=_tls(), origin=browser.origin,
                       additional_headers=cookie)  # fmt: skip

    async with open_socket() as first, open_socket() as second:
        async with open_socket() as third:
            told = await asyncio.wait_for(third.recv(), 10)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(third.recv(), 10)
        assert 'data-code="too_many_connections"' in told
        assert closed.value.rcvd.code == 4429
        for ws in (first, second):  # the older ones keep working
            await ws.send('{"action": "sync", "after": 0}')
            assert await asyncio.wait_for(ws.recv(), 10)
