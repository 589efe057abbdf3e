"""The egress proxy over its Unix socket: SSRF in every encoding, names resolving inward,
DNS rebinding, rules for another user, the byte and connection bounds, the credential,
and the log."""

from __future__ import annotations

import asyncio

import pytest

from agent.models import Conversation, EgressDay, EgressLog, EgressRule, User
from agent.runs import git_credentials
from agent.runs.egress import credential
from agent.server import metrics
from tests.egress.conftest import BODY, fixed

pytestmark = pytest.mark.django_db(transaction=True)


def get(host: str, path: str = "/") -> bytes:
    return f"GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


async def test_an_admitted_host_is_fetched_and_logged(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    answer = await proxy.ask(get(f"127.0.0.1:{origin}"))
    assert answer.startswith(b"HTTP/1.0 200") and BODY in answer
    row = await EgressLog.objects.aget()
    assert (row.user_id, row.host, row.port, row.allowed) == (ada.id, "127.0.0.1", origin, True)
    assert row.bytes_down == len(answer) and row.bytes_up > 0
    text = metrics.render()
    assert 'harness_egress_connections_total{outcome="allowed"}' in text
    assert metrics.EGRESS_BYTES.values["down"] >= len(answer)


@pytest.mark.parametrize("host", ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1",
                                  "127.1", "[::1]", "[::ffff:127.0.0.1]", "localhost.",
                                  "169.254.169.254", "10.0.0.1", "[fd00:ec2::254]"])  # fmt: skip
async def test_inward_addresses_in_every_encoding_are_refused(ada, allow, proxied, host):
    allow("*.example.com")
    proxy = await proxied(ada)
    for request in (get(f"{host}:80"), f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode()):
        answer = await proxy.ask(request)
        assert answer.startswith(b"HTTP/1.1 403"), answer
        assert host.strip("[]").removesuffix(".").encode() in answer
    assert not await EgressLog.objects.filter(allowed=True).aexists()


@pytest.mark.parametrize("address, why", [("127.0.0.1", b"loopback"), ("10.1.2.3", b"private"),
                                          ("169.254.169.254", b"metadata"),
                                          ("::ffff:127.0.0.1", b"loopback")])  # fmt: skip
async def test_an_admitted_name_resolving_inward_is_refused(ada, allow, proxied, address, why):
    allow("*.example.com")
    proxy = await proxied(ada, resolve=fixed(address))
    answer = await proxy.ask(b"CONNECT evil.example.com:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403") and why in answer and b"evil.example.com" in answer
    row = await EgressLog.objects.aget()
    assert not row.allowed and why.decode() in row.reason


async def test_dns_rebinding_gains_nothing(ada, allow, origin, proxied):
    """The name is resolved once and the checked address connected to: a resolver that
    answers differently the second time is never asked a second time."""
    allow(f"rebind.example.com:{origin}")
    resolve = fixed("127.0.0.1", "10.9.9.9")
    proxy = await proxied(ada, resolve=resolve)
    answer = await proxy.ask(get(f"rebind.example.com:{origin}"))
    assert BODY in answer and resolve.calls == ["rebind.example.com"]
    again = await proxy.ask(get(f"rebind.example.com:{origin}"))  # a new request: a new lookup
    assert BODY not in again and b"10.9.9.9" in again and len(resolve.calls) == 2


async def test_a_rule_for_another_user_admits_nobody_else(ada, allow, origin, proxied):
    bob = await User.objects.acreate_user("bob", password="x")
    await EgressRule.objects.acreate(host="127.0.0.1", ports=str(origin), user=bob)
    answer = await (await proxied(ada)).ask(get(f"127.0.0.1:{origin}"))
    assert answer.startswith(b"HTTP/1.1 403") and b"no egress rule" in answer
    assert BODY in await (await proxied(bob)).ask(get(f"127.0.0.1:{origin}"))
    await EgressRule.objects.acreate(host="127.0.0.1", ports=str(origin))
    assert BODY in await (await proxied(ada)).ask(get(f"127.0.0.1:{origin}"))


async def test_the_daily_byte_bound_stops_and_then_refuses(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada, bound_bytes=50_000)
    answer = await proxy.ask(get(f"127.0.0.1:{origin}", "/big"))
    assert len(answer) < 100_000
    first = await EgressLog.objects.aget()
    assert first.allowed and "bound" in first.reason
    refused = await proxy.ask(get(f"127.0.0.1:{origin}"))
    assert refused.startswith(b"HTTP/1.1 403") and b"HARNESS_EGRESS_MB_PER_DAY" in refused


async def test_one_sandbox_holds_at_most_its_connections(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada, connections=1)
    reader, writer = await asyncio.open_unix_connection(proxy.path)
    writer.write(f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\n\r\n".encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    answer = await proxy.ask(get(f"127.0.0.1:{origin}"))
    assert answer.startswith(b"HTTP/1.1 403") and b"connections open" in answer
    writer.close()
    await writer.wait_closed()
    other = await proxied(ada, connections=1)  # another sandbox has its own bound
    assert BODY in await other.ask(get(f"127.0.0.1:{origin}"))


async def test_one_user_holds_at_most_their_connections_across_conversations(
    ada, allow, origin, proxied
):
    """Many conversations each under their own bound still cannot take every connection
    of the process: their user's are bounded together, and another user's go on."""
    allow(f"127.0.0.1:{origin}")
    one, two = [await Conversation.objects.acreate(owner=ada) for _ in range(2)]
    first = await proxied(ada, conversation=one.id, user_connections=1)
    second = await proxied(ada, conversation=two.id, beside=first)
    reader, writer = await asyncio.open_unix_connection(first.path)
    writer.write(f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\n\r\n".encode())
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    answer = await second.ask(get(f"127.0.0.1:{origin}"))
    assert answer.startswith(b"HTTP/1.1 403") and b"across their conversations" in answer
    bob = await User.objects.acreate_user("bob", password="x")
    assert BODY in await (await proxied(bob, beside=first)).ask(get(f"127.0.0.1:{origin}"))
    writer.close()
    await writer.wait_closed()
    for _ in range(100):  # the proxy sees the tunnel's end on its own time
        if BODY in (answer := await second.ask(get(f"127.0.0.1:{origin}"))):
            break
        await asyncio.sleep(0.05)
    assert BODY in answer


async def test_the_credential_goes_to_its_host_over_plain_http_only(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}, localhost:{origin}")
    await asyncio.to_thread(git_credentials.store, ada, f"127.0.0.1:{origin}", "ada", "s3cret")
    proxy = await proxied(ada, credential=credential)
    answer = await proxy.ask(get(f"127.0.0.1:{origin}"))
    assert b"auth=Basic YWRhOnMzY3JldA==" in answer
    elsewhere = await proxy.ask(get(f"localhost:{origin}"))
    assert b"auth=None" in elsewhere


async def test_a_smuggled_or_oversized_head_is_a_400_naming_why(ada, allow, origin, proxied):
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    smuggled = (
        f"POST http://127.0.0.1:{origin}/ HTTP/1.1\r\nContent-Length: 4\r\n"
        "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://10.0.0.1/ HTTP/1.1\r\n\r\n"
    )
    answer = await proxy.ask(smuggled.encode())
    assert answer.startswith(b"HTTP/1.1 400") and b"both Content-Length and Transfer" in answer
    huge = get(f"127.0.0.1:{origin}")[:-2] + b"X-A: " + b"a" * 20_000 + b"\r\n\r\n"
    answer = await proxy.ask(huge)
    assert answer.startswith(b"HTTP/1.1 400") and b"too large" in answer
    assert not await EgressLog.objects.aexists()  # nothing was resolved or connected


async def test_connections_ending_together_all_count_in_the_day(ada, allow, origin, proxied):
    """A race run as a race: the day's row is made by one of them, the rest add to it."""
    allow(f"127.0.0.1:{origin}")
    proxy = await proxied(ada)
    answers = await asyncio.gather(*(proxy.ask(get(f"127.0.0.1:{origin}")) for _ in range(6)))
    assert all(BODY in answer for answer in answers)
    rows = [row async for row in EgressLog.objects.all()]
    day = await EgressDay.objects.aget(user=ada)
    assert len(rows) == 6 and day.bytes == sum(row.bytes_up + row.bytes_down for row in rows)
