"""Open sockets and event streams end when their credential does: a revoked token, a changed
password, a deleted session; and sockets from another origin (port, scheme) are refused.

In-process, over the real ASGI application (routing, origin check, session auth, the
Django handler for the event stream) and the in-memory channel layer."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator
from django.contrib.auth import HASH_SESSION_KEY
from django.contrib.auth.hashers import make_password
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from agent.models import ApiToken, Conversation, User
from agent.runs.manager import runs
from harness_site.asgi import application
from testkit.model_server import text_reply
from tests.web import test_consumer
from tests.web.test_consumer import make_user, socket

# The consumer tests' fixtures: a user with a conversation, the agent on the test model.
agent_settings, alice = test_consumer.agent_settings, test_consumer.alice

pytestmark = pytest.mark.django_db(transaction=True)

CLOSE_WITHIN = 5.0  # seconds: "ends within a few seconds"


def signed_in(user) -> tuple[Client, str]:
    client = Client()
    client.force_login(user)
    return client, client.cookies["sessionid"].value


async def open_socket(conversation, user):
    _, key = await sync_to_async(signed_in)(user)
    ws = socket(conversation, f"sessionid={key}".encode())
    assert (await ws.connect())[0]
    return ws, key


async def closed_within(ws, seconds: float) -> str:
    """Everything the socket got until it was closed; fails if it is still open after
    ``seconds``."""
    received = ""
    async with asyncio.timeout(seconds):
        while True:
            message = await ws.receive_output(timeout=seconds)
            if message["type"] == "websocket.close":
                return received
            received += message.get("text", "")


# -- WebSockets: a changed password ends the sessions signed in with the old one ----------


async def test_changing_the_password_closes_the_users_open_sockets(alice):
    user, conversation = alice
    ws, _ = await open_socket(conversation, user)
    user.set_password("a-new-password-5678")
    await sync_to_async(user.save)()  # e.g. the admin's password form
    assert "signed_out" in await closed_within(ws, CLOSE_WITHIN)


async def test_a_password_changed_without_a_signal_refuses_the_next_frame(alice, model_server):
    user, conversation = alice
    ws, _ = await open_socket(conversation, user)
    # A bulk update sends no signal: the per-frame check alone must notice.
    await sync_to_async(User.objects.filter(pk=user.pk).update)(
        password=make_password("changed-behind-its-back")
    )
    await ws.send_to(text_data=json.dumps({"content": "still signed in?"}))
    assert "signed_out" in await closed_within(ws, CLOSE_WITHIN)
    assert model_server.requests == []  # the prompt never reached the model


async def test_a_streaming_socket_is_closed_soon_after_its_password_changes(alice, model_server):
    """No frame from the page: the re-check while frames go out ends the socket."""
    user, conversation = alice
    model_server.enqueue(text_reply("word " * 1000, delay=0.01))  # ~10 s of streaming
    ws, _ = await open_socket(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "talk for a while"}))
    html = ""
    while "live-text" not in html:
        html += await ws.receive_from()
    await sync_to_async(User.objects.filter(pk=user.pk).update)(
        password=make_password("changed-behind-its-back")
    )
    started = time.monotonic()
    rest = await closed_within(ws, CLOSE_WITHIN)
    assert "signed_out" in rest and 'data-state="idle"' not in rest
    assert time.monotonic() - started < CLOSE_WITHIN
    await runs.cancel(conversation.id)
    await runs.wait(conversation.id)


async def test_a_session_re_signed_with_the_new_password_keeps_its_socket(alice, model_server):
    """Django re-signs the session of a user who changes their own password
    (update_session_auth_hash): that session's socket goes on."""
    user, conversation = alice
    ws, key = await open_socket(conversation, user)

    def change_password_and_re_sign_session():
        User.objects.filter(pk=user.pk).update(password=make_password("my-new-password-1"))
        fresh = User.objects.get(pk=user.pk)
        session = Session.objects.get(session_key=key)
        data = session.get_decoded()
        data[HASH_SESSION_KEY] = fresh.get_session_auth_hash()
        Session.objects.filter(session_key=key).update(session_data=Session.objects.encode(data))

    await sync_to_async(change_password_and_re_sign_session)()
    model_server.enqueue(text_reply("still here"))
    await ws.send_to(text_data=json.dumps({"content": "hello"}))
    html = ""
    async with asyncio.timeout(10):
        while 'data-state="idle"' not in html:
            html += await ws.receive_from()
    assert "still here" in html and "signed_out" not in html
    await runs.wait(conversation.id)
    await ws.disconnect()


async def test_a_deleted_session_refuses_the_next_frame(alice, model_server):
    user, conversation = alice
    ws, key = await open_socket(conversation, user)
    # e.g. an admin clearing a user's sessions: no sign-out signal is sent.
    await sync_to_async(Session.objects.filter(session_key=key).delete)()
    await ws.send_to(text_data=json.dumps({"content": "anyone?"}))
    assert "signed_out" in await closed_within(ws, CLOSE_WITHIN)
    assert model_server.requests == []


# -- WebSockets: the whole origin must match ----------------------------------------------


@pytest.mark.parametrize(
    "origin, host",
    [
        (b"http://localhost:8001", b"localhost:8000"),  # another port of the same host
        (b"http://localhost:8001", b"localhost"),
        (b"https://localhost", b"localhost"),  # another scheme (the server sees ws://)
        (b"http://localhost", b"localhost:8000"),
        (b"null", b"localhost"),
        (b"http://evil.example", b"localhost"),
        (b"http://evil.example", b"evil.example"),  # a host that is not ours (rebinding)
    ],
)
async def test_a_socket_from_another_origin_of_the_same_host_is_refused(alice, origin, host):
    user, conversation = alice
    _, key = await sync_to_async(signed_in)(user)
    ws = socket(conversation, f"sessionid={key}".encode(), origin=origin)
    ws.scope["headers"] = [
        (b"host", host) if k == b"host" else (k, v) for k, v in ws.scope["headers"]
    ]
    ok, _ = await ws.connect()
    assert not ok


async def test_a_socket_without_an_origin_is_refused(alice):
    user, conversation = alice
    _, key = await sync_to_async(signed_in)(user)
    ws = socket(conversation, f"sessionid={key}".encode())
    ws.scope["headers"] = [(k, v) for k, v in ws.scope["headers"] if k != b"origin"]
    assert not (await ws.connect())[0]


async def test_a_socket_from_the_same_origin_with_its_port_is_accepted(alice):
    user, conversation = alice
    _, key = await sync_to_async(signed_in)(user)
    ws = socket(conversation, f"sessionid={key}".encode(), origin=b"http://localhost:8000")
    ws.scope["headers"] = [(b"host", b"localhost:8000") if k == b"host" else (k, v)
                           for k, v in ws.scope["headers"]]  # fmt: skip
    assert (await ws.connect())[0]
    await ws.disconnect()


def _scope(origin: str, host: str = "example.com", scheme: str = "ws", **headers: str) -> dict:
    pairs = [(b"origin", origin.encode()), (b"host", host.encode())]
    pairs += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": "websocket", "scheme": scheme, "headers": pairs}


def test_the_origin_must_match_the_scheme_the_server_sees(settings):
    from agent.server.origin import origin_allowed

    settings.ALLOWED_HOSTS = ["example.com"]
    assert origin_allowed(_scope("https://example.com", scheme="wss"))
    assert not origin_allowed(_scope("http://example.com", scheme="wss"))
    assert origin_allowed(_scope("http://example.com", scheme="ws"))
    assert not origin_allowed(_scope("https://example.com", scheme="ws"))
    assert not origin_allowed(_scope("https://example.com:8443", scheme="wss"))
    assert origin_allowed(_scope("https://example.com:8443", "example.com:8443", "wss"))


def test_behind_a_tls_proxy_the_forwarded_scheme_counts(settings):
    """DJANGO_BEHIND_TLS_PROXY=1 sets SECURE_PROXY_SSL_HEADER: the proxy's word is the
    scheme, as for request.is_secure(); without that setting the header is ignored."""
    from agent.server.origin import origin_allowed

    settings.ALLOWED_HOSTS = ["example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert origin_allowed(_scope("https://example.com", x_forwarded_proto="https"))
    assert not origin_allowed(_scope("http://example.com", x_forwarded_proto="https"))
    assert not origin_allowed(_scope("https://example.com", scheme="wss", x_forwarded_proto="http"))
    settings.SECURE_PROXY_SSL_HEADER = None
    assert not origin_allowed(_scope("https://example.com", x_forwarded_proto="https"))


def test_csrf_trusted_origins_are_accepted_exactly(settings):
    from agent.server.origin import origin_allowed

    settings.ALLOWED_HOSTS = ["example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.com", "https://*.corp.example"]
    assert origin_allowed(_scope("https://app.example.com"))
    assert origin_allowed(_scope("https://team.corp.example"))
    assert not origin_allowed(_scope("http://app.example.com"))
    assert not origin_allowed(_scope("https://app.example.com:444"))
    assert not origin_allowed(_scope("https://corp.example.evil"))


# -- API event streams: a revoked token ends them -----------------------------------------


async def open_stream(token: str, conversation_id) -> ApplicationCommunicator:
    path = f"/api/conversations/{conversation_id}/events"
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("localhost", 80),
        "headers": [(b"host", b"localhost"), (b"authorization", f"Bearer {token}".encode())],
    }  # fmt: skip
    stream = ApplicationCommunicator(application, scope)
    await stream.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await stream.receive_output(timeout=10)
    assert start["type"] == "http.response.start" and start["status"] == 200
    return stream


async def ends_within(stream: ApplicationCommunicator, seconds: float) -> bool:
    """Whether the response ends within ``seconds``; it stays usable if it does not (the
    communicator's own receive_output cancels the application on a timeout)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(stream.output_queue.get(), left)
        except TimeoutError:
            assert not stream.future.done(), stream.future.result()
            return False
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            return True
    return False


@pytest.fixture
def api_user(agent_settings):  # noqa: F811
    # A heartbeat far beyond the deadline: only the revocation message can end the stream.
    agent_settings.HARNESS_SSE_HEARTBEAT = 60
    from agent.web.api_tokens import create_token

    user = make_user("tokenuser")
    conversation = Conversation.objects.create(owner=user, model="claude-haiku-4-5")
    record, token = create_token(user, "laptop")
    return record, token, conversation


async def test_revoking_a_token_in_the_admin_ends_its_open_event_stream(api_user):
    record, token, conversation = api_user
    stream = await open_stream(token, conversation.id)
    admin = Client()
    staff = await sync_to_async(User.objects.create_superuser)("root", password="pw-root-1234")
    await sync_to_async(admin.force_login)(staff)
    response = await sync_to_async(admin.post)(
        "/admin/agent/apitoken/", {"action": "revoke_tokens", "_selected_action": [record.id]}
    )
    assert response.status_code == 302
    assert await ends_within(stream, CLOSE_WITHIN)


async def test_revoking_a_token_by_saving_it_ends_its_open_event_stream(api_user):
    record, token, conversation = api_user
    stream = await open_stream(token, conversation.id)
    record.revoked = timezone.now()
    await sync_to_async(record.save)()  # the admin's change form, or a shell
    assert await ends_within(stream, CLOSE_WITHIN)


async def test_deleting_a_token_ends_its_open_event_stream(api_user):
    record, token, conversation = api_user
    stream = await open_stream(token, conversation.id)
    await sync_to_async(record.delete)()
    assert await ends_within(stream, CLOSE_WITHIN)


async def test_revoking_another_token_leaves_a_stream_open(api_user):
    from agent.web.api_tokens import create_token, revoke_token

    record, token, conversation = api_user
    stream = await open_stream(token, conversation.id)
    other, _ = await sync_to_async(create_token)(record.user, "phone")
    await sync_to_async(revoke_token)(other)
    assert not await ends_within(stream, 1.5)
    assert await sync_to_async(ApiToken.objects.filter(revoked__isnull=True).count)() == 1
    await sync_to_async(revoke_token)(record)
    assert await ends_within(stream, CLOSE_WITHIN)


async def test_a_token_revoked_without_a_signal_ends_its_stream_at_the_next_heartbeat(
    api_user, settings
):
    record, token, conversation = api_user
    settings.HARNESS_SSE_HEARTBEAT = 1
    stream = await open_stream(token, conversation.id)
    await sync_to_async(ApiToken.objects.filter(pk=record.pk).update)(revoked=timezone.now())
    assert await ends_within(stream, CLOSE_WITHIN)


async def test_a_user_deactivated_without_a_signal_ends_their_stream_at_the_next_heartbeat(
    api_user,
    settings,
):
    record, token, conversation = api_user
    settings.HARNESS_SSE_HEARTBEAT = 1
    stream = await open_stream(token, conversation.id)
    await sync_to_async(User.objects.filter(pk=record.user_id).update)(is_active=False)
    assert await ends_within(stream, CLOSE_WITHIN)
