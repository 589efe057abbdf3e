"""The kit's nginx site in front of the kit's Daphne unit, live: HTTPS is recognised from
X-Forwarded-Proto (no redirect loop), the throttles see the client's address rather than
the proxy's (X-Forwarded-For + --proxy-headers), and the page's WebSocket goes through."""

from __future__ import annotations

import asyncio
import http.client
import re
import socket
import ssl
import subprocess
import time
import urllib.parse

import pytest
from websockets.asyncio.client import connect

from testkit.live import free_port
from tests.deploy.test_kit import DEPLOY, HOST, UnitServer, _nginx_config, _tool

PROXY_ADDRESS = "127.0.0.2"  # nginx reaches Daphne from here; the client is 127.0.0.1


@pytest.fixture
def proxied(tmp_path):
    nginx = _tool("nginx")
    server, process = UnitServer(tmp_path), None
    try:
        server.probe()
        server.manage("shell", "-c", "from agent.models import User; "
                      "User.objects.create_user('ann', password='pw-ann-12345')")  # fmt: skip
        port = free_port()
        config = _nginx_config(tmp_path, _site_for_test(server.port, port))
        errors = tmp_path / "nginx.stderr"
        process = subprocess.Popen([nginx, "-p", str(tmp_path), "-c", str(config), "-g",
                                    "daemon off;"], stderr=errors.open("wb"))  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None and time.monotonic() < deadline, errors.read_text()
            time.sleep(0.05)
        yield server, port
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=10)
        server.stop()


def _site_for_test(daphne_port: int, port: int) -> str:
    """The kit's site on a test port, in front of one Daphne, without IPv6 listeners, and
    reaching Daphne from its own address (as a proxy on another host would)."""
    site = (DEPLOY / "nginx" / "harness.conf").read_text()
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
