"""Live connections per user (HARNESS_SOCKETS_PER_USER, agent/server/user_connections.py):
one user's page sockets and API event streams together are bounded in each process, the
one past the bound is refused with its reason while the older ones keep working, every
way a connection ends gives its slot back, and a socket of no signed-in user is refused
before anything is kept for it. Over the real ASGI stack (origin check, session, routing)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator

from agent.models import Conversation
from agent.server.user_connections import Slot, UserConnections, connections
from agent.web.api import EventStream
from agent.web.consumers import CLOSE_SIGNED_OUT, CLOSE_TOO_MANY, ConversationConsumer
from harness_site.asgi import application
from tests.web import test_consumer
from tests.web.test_consumer import make_user, session_cookie, socket

agent_settings = test_consumer.agent_settings

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 3
SYNC = json.dumps({"action": "sync", "after": 0})


@pytest.fixture
def limited(agent_settings):
    agent_settings.HARNESS_SOCKETS_PER_USER = LIMIT
    agent_settings.HARNESS_SSE_HEARTBEAT = 60  # only the test ends a stream
    user = make_user("lim")
    conversation = Conversation.objects.create(owner=user, model="claude-haiku-4-5")
    yield user, conversation
    assert connections.held(user.pk) == 0  # nothing the test opened is still counted


# -- the counter ---------------------------------------------------------------------------


def test_the_counter_bounds_each_user_alone_and_counts_a_release_once(settings):
    settings.HARNESS_SOCKETS_PER_USER = 2
    counter = UserConnections()
    first, second = counter.take(1), counter.take(1)
    assert isinstance(first, Slot) and isinstance(second, Slot)
    assert counter.take(1) is None  # the third of user 1
    assert counter.take(2) is not None  # another user is not affected
    first.release()
    first.release()  # twice: counted once
    assert counter.held(1) == 1
    with counter.take(1):
        assert counter.held(1) == 2 and counter.take(1) is None
    second.release()
    assert counter.held(1) == 0 and 1 not in counter._held  # no entry left behind


def test_threads_racing_for_the_last_slots_never_pass_the_bound(settings):
    settings.HARNESS_SOCKETS_PER_USER = 5
    counter, start, taken = UserConnections(), threading.Barrier(16), []

    def racer():
        start.wait()
        taken.append(counter.take(7))

    threads = [threading.Thread(target=racer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(slot is not None for slot in taken) == 5 and counter.held(7) == 5


# -- page sockets -------------------------------------------------------------------------


async def attempt(conversation, cookie: bytes):
    """One socket's handshake: (socket, None) when admitted; (None, (close code, what it
    was told)) when refused."""
    ws = socket(conversation, cookie)
    ok, code = await ws.connect(timeout=10)
    if not ok:
        return None, (code, "")
    await ws.send_to(text_data=SYNC)  # an admitted socket answers it
    first = await ws.receive_output(timeout=10)
    if first["type"] == "websocket.send" and "too_many_connections" in first["text"]:
        closing = await ws.receive_output(timeout=10)
        assert closing["type"] == "websocket.close", closing
        await ws.wait(timeout=5)  # the refused socket's application is done
        return None, (closing["code"], first["text"])
    assert first["type"] == "websocket.send" and "too_many" not in first["text"], first
    return ws, None


async def still_answers(ws) -> bool:
    await ws.send_to(text_data=SYNC)
    return (await ws.receive_output(timeout=10))["type"] == "websocket.send"


async def test_n_plus_one_sockets_at_once_admit_n_and_the_refused_one_hears_why(limited):
    user, conversation = limited
    cookie = await sync_to_async(session_cookie)(user)
    results = await asyncio.gather(*(attempt(conversation, cookie) for _ in range(LIMIT + 1)))
    admitted = [ws for ws, _ in results if ws is not None]
    refused = [why for ws, why in results if ws is None]
    assert len(admitted) == LIMIT and len(refused) == 1
    code, told = refused[0]
    assert code == CLOSE_TOO_MANY == 4429
    assert 'data-code="too_many_connections"' in told and f"{LIMIT} live pages" in told
    assert connections.held(user.pk) == LIMIT
    # The older sockets are untouched by the refusal.
    assert all([await still_answers(ws) for ws in admitted])
    # Another user is not held back by this one's sockets.
    other = await sync_to_async(make_user)("other")
    theirs = await sync_to_async(Conversation.objects.create)(owner=other, model="m")
    ws, why = await attempt(theirs, await sync_to_async(session_cookie)(other))
    assert ws is not None, why
    await ws.disconnect()
    # One closed, one more admitted; and the bound holds again.
    await admitted.pop().disconnect()
    assert connections.held(user.pk) == LIMIT - 1
    again, why = await attempt(conversation, cookie)
    assert again is not None, why
    admitted.append(again)
    assert (await attempt(conversation, cookie))[1][0] == CLOSE_TOO_MANY
    for ws in admitted:
        await ws.disconnect()
    assert connections.held(user.pk) == 0


async def test_a_socket_cancelled_or_closed_by_the_server_gives_its_slot_back(limited):
    user, conversation = limited
    cookie = await sync_to_async(session_cookie)(user)
    cancelled, _ = await attempt(conversation, cookie)
    assert connections.held(user.pk) == 1
    cancelled.future.cancel()  # the server cancels the application (Daphne's close timeout)
    with pytest.raises(asyncio.CancelledError):
        await cancelled.future
    assert connections.held(user.pk) == 0
    # A socket the server closes (the conversation deleted), then its client leaves.
    gone, _ = await attempt(conversation, cookie)
    await sync_to_async(conversation.delete)()
    while (await gone.receive_output(timeout=10))["type"] != "websocket.close":
        pass
    await gone.disconnect(code=4404)
    assert connections.held(user.pk) == 0


async def test_an_anonymous_socket_is_refused_before_a_consumer_exists(limited, monkeypatch):
    _, conversation = limited
    made = []
    original = ConversationConsumer.__init__

    def spy(self, *args, **kwargs):
        made.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ConversationConsumer, "__init__", spy)
    for cookie in (None, b"sessionid=not-a-session"):
        ok, code = await socket(conversation, cookie).connect(timeout=10)
        assert not ok and code == CLOSE_SIGNED_OUT  # at the handshake: HTTP 403 under Daphne
    assert made == [] and connections._held == {}


# -- API event streams --------------------------------------------------------------------


def _token(user) -> str:
    from agent.web.api_tokens import create_token

    return create_token(user, "laptop")[1]


async def request_stream(token: str, conversation_id) -> tuple[ApplicationCommunicator, dict]:
    path = f"/api/conversations/{conversation_id}/events"
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("localhost", 80),
        "headers": [(b"host", b"localhost"), (b"authorization", f"Bearer {token}".encode())],
    }  # fmt: skip
    stream = ApplicationCommunicator(application, scope)
    await stream.send_input({"type": "http.request", "body": b"", "more_body": False})
    return stream, await stream.receive_output(timeout=10)


async def refusal(stream: ApplicationCommunicator) -> dict:
    body = await stream.receive_output(timeout=10)
    await stream.wait(timeout=5)
    return json.loads(body["body"])


async def end(stream: ApplicationCommunicator) -> None:
    await stream.send_input({"type": "http.disconnect"})
    await stream.wait(timeout=10)


async def test_n_plus_one_streams_at_once_admit_n_and_the_last_gets_429(limited):
    user, conversation = limited
    token = await sync_to_async(_token)(user)
    results = await asyncio.gather(*(request_stream(token, conversation.id)
                                     for _ in range(LIMIT + 1)))  # fmt: skip
    statuses = sorted(start["status"] for _, start in results)
    assert statuses == [200] * LIMIT + [429]
    streams = [stream for stream, start in results if start["status"] == 200]
    refused = next(stream for stream, start in results if start["status"] == 429)
    payload = await refusal(refused)
    assert payload["error"] == "too_many_connections" and str(LIMIT) in payload["message"]
    for stream in streams:  # still open: each got its first bytes and nothing ended it
        first = await stream.receive_output(timeout=10)
        assert first["body"].startswith(b": connected") and first["more_body"]
    await end(streams.pop())
    assert connections.held(user.pk) == LIMIT - 1
    stream, start = await request_stream(token, conversation.id)
    assert start["status"] == 200
    streams.append(stream)
    for stream in streams:
        await end(stream)
    assert connections.held(user.pk) == 0


async def test_sockets_and_streams_share_the_bound(limited):
    user, conversation = limited
    token = await sync_to_async(_token)(user)
    cookie = await sync_to_async(session_cookie)(user)
    sockets = [(await attempt(conversation, cookie))[0] for _ in range(LIMIT - 1)]
    stream, start = await request_stream(token, conversation.id)
    assert start["status"] == 200
    assert (await attempt(conversation, cookie))[1][0] == CLOSE_TOO_MANY
    extra, start = await request_stream(token, conversation.id)
    assert start["status"] == 429 and (await refusal(extra))["error"] == "too_many_connections"
    await sockets.pop().disconnect()
    extra, start = await request_stream(token, conversation.id)
    assert start["status"] == 200
    for each in (stream, extra):
        await end(each)
    for ws in sockets:
        await ws.disconnect()


def test_a_stream_response_closed_before_it_started_gives_its_slot_back(settings):
    settings.HARNESS_SOCKETS_PER_USER = 1
    slot = connections.take(-1)

    async def never_iterated():
        yield ": connected\n\n"

    response = EventStream(never_iterated(), slot, content_type="text/event-stream")
    assert connections.held(-1) == 1
    response.close()  # what Django's handler does once a response is done, sent or not
    assert connections.held(-1) == 0
    dropped = EventStream(never_iterated(), connections.take(-1))
    del dropped  # never closed: its finalizer gives the slot back
    assert connections.held(-1) == 0
