"""The egress proxy on a Unix socket in the test's loop, a local HTTP origin, users."""

from __future__ import annotations

import asyncio
import socket
from http.server import BaseHTTPRequestHandler

import pytest

from agent.core.egress_rules import parse_rules
from agent.egress.proxy import EgressProxy, Who
from agent.models import User
from testkit.http_origin import serving

BODY = b"hello from the origin\n"


class _Origin(BaseHTTPRequestHandler):
    """Answers ``/big`` with 200 KiB, anything else with BODY and the Authorization it saw."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = b"x" * 200_000 if self.path == "/big" else BODY
        body += f"auth={self.headers.get('Authorization')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def origin():
    with serving(_Origin) as port:
        yield port


@pytest.fixture
def allow(settings):
    def set_rules(text: str) -> None:
        settings.HARNESS_EGRESS_ALLOW = parse_rules(text)

    set_rules("")
    return set_rules


@pytest.fixture
def ada(db):
    return User.objects.create_user("ada", password="x")


class Proxied:
    """A proxy listening for one sandbox; ``ask`` sends raw bytes and reads the answer."""

    def __init__(self, proxy: EgressProxy, path: str) -> None:
        self.proxy, self.path = proxy, path

    async def ask(self, data: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(self.path)
        writer.write(data)
        await writer.drain()
        answer = await reader.read()
        writer.close()
        return answer


@pytest.fixture
async def proxied(tmp_path):
    made: list[EgressProxy] = []

    async def start(user, *, conversation=None, beside: Proxied | None = None,
                    **options) -> Proxied:  # fmt: skip
        """A sandbox's socket on a new proxy, or on ``beside``'s (as one process serves
        all its conversations)."""
        proxy = beside.proxy if beside else EgressProxy(**options)
        path = str(tmp_path / f"egress-{len(made)}.sock")
        await proxy.listen(path, Who(user.id if user else None, conversation))
        made.append(proxy)
        return Proxied(proxy, path)

    yield start
    for proxy in made:
        await proxy.close()


def fixed(*answers: str):
    """An injectable resolver answering each call with the next address (the last repeats),
    counting its calls."""
    calls: list[str] = []

    def resolve(host, port, type=socket.SOCK_STREAM):
        calls.append(host)
        address = answers[min(len(calls), len(answers)) - 1]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, type, 6, "", (address, port))]

    resolve.calls = calls
    return resolve
