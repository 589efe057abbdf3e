"""The WebSocket consumer over the real ASGI routing stack (origin check, session auth)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

import agent.runs.run as runs_module
from agent.models import Conversation, Event
from agent.runs.groups import group_name
from agent.runs.manager import runs
from agent.runs.pacing import MIN_INTERVAL, loop_lag
from agent.ui.fragments import sync_marker
from agent.web.feed import Batch
from harness_site.asgi import application
from testkit.model_server import text_reply, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def agent_settings(settings, model_server, tmp_path):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = model_server.url
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "off"
    return settings


def make_user(name):
    from agent.models import User

    return User.objects.create_user(username=name, password=f"pw-{name}-1234")


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def alice(agent_settings):
    user = make_user("alice")
    return user, Conversation.objects.create(owner=user, model="claude-haiku-4-5")


def socket(conversation, cookie: bytes | None, origin=b"http://localhost"):
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, f"/ws/c/{conversation.id}/", headers=headers)


async def connected(conversation, user):
    cookie = await sync_to_async(session_cookie)(user)
    ws = socket(conversation, cookie)
    ok, _ = await ws.connect()
    assert ok
    return ws


async def frames_holding(ws, text: str, seconds: float) -> list[str]:
    """The frames that hold ``text`` among those received within ``seconds``."""
    found = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while True:
                frame = await ws.receive_from(timeout=seconds)
                if text in frame:
                    found.append(frame)
    return found


async def collect_until_idle(ws, timeout=10.0) -> str:
    html = ""
    async with asyncio.timeout(timeout):
        while 'data-state="idle"' not in html and 'data-state="error"' not in html:
            html += await ws.receive_from(timeout=timeout)
    return html


async def test_prompt_streams_fragments_and_persists_every_event(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("Hello **world**", delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "say hi", "HEADERS": {"HX-Request": "true"}}))
    html = await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert 'data-part="user"' in html and "say hi" in html
    assert 'id="live-text"' in html and 'hx-swap-oob="delete:#live-text"' in html
    assert "<strong>world</strong>" in html and 'data-state="thinking"' in html
    assert '<span id="conv-title" class="conv-title" hx-swap-oob="true">say hi</span>' in html
    events = await sync_to_async(list)(Event.objects.filter(conversation=conversation))
    kinds = [e.type for e in events]
    assert kinds == ["user", "status", "text", "usage", "status"]
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(e.payload["seq"] == e.seq and e.payload["type"] == e.type for e in events)
    await sync_to_async(conversation.refresh_from_db)()
    await sync_to_async(user.refresh_from_db)()
    assert conversation.state == "idle" and conversation.title == "say hi"
    assert conversation.input_tokens == 10 and conversation.last_seq >= seqs[-1]
    assert conversation.history[-1]["role"] == "assistant"
    assert user.prompt_history == ["say hi"]
    await ws.disconnect()


async def test_tool_card_is_rendered_running_then_updated_with_its_result(alice, model_server):
    user, conversation = alice
    model_server.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("done"))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "list"}))
    html = await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert 'data-tool-name="list_dir" data-tool-status="running"' in html
    assert 'data-tool-status="ok" hx-swap-oob="true"' in html and "total " in html
    await ws.disconnect()


async def test_other_users_conversation_socket_is_refused(alice):
    _, conversation = alice
    mallory = await sync_to_async(make_user)("mallory")
    cookie = await sync_to_async(session_cookie)(mallory)
    ok, code = await socket(conversation, cookie).connect()
    assert not ok and code == 4404


async def test_anonymous_socket_is_refused(alice):
    _, conversation = alice
    ok, _ = await socket(conversation, None).connect()
    assert not ok


async def test_cross_origin_socket_is_refused(alice):
    user, conversation = alice
    cookie = await sync_to_async(session_cookie)(user)
    ok, _ = await socket(conversation, cookie, origin=b"http://evil.example").connect()
    assert not ok


@pytest.mark.parametrize(
    "frame",
    ["not json", "[1, 2]", '"just a string"', '{"content": 5}', '{"content": "   "}',
     '{"action": "explode"}', "{}"],
)  # fmt: skip
async def test_malformed_frames_get_an_error_fragment_and_the_socket_survives(
    alice, model_server, frame
):
    user, conversation = alice
    ws = await connected(conversation, user)
    await ws.send_to(text_data=frame)
    reply = await ws.receive_from()
    assert 'data-part="error"' in reply
    model_server.enqueue(text_reply("still alive"))
    await ws.send_to(text_data=json.dumps({"content": "ok?"}))
    assert "still alive" in await collect_until_idle(ws)
    await runs.wait(conversation.id)
    await ws.disconnect()


# Every field of a frame given a JSON type other than its own (an object where a string
# or a number belongs): refused in words, never an exception that closes the socket.
WRONG_TYPES = [
    {"content": {"$gt": ""}}, {"content": "x", "mode": {"a": 1}}, {"content": "x", "mode": []},
    {"content": "x", "images": {"a": 1}}, {"content": "x", "images": [{"a": 1}]},
    {"action": {"a": 1}}, {"action": ["cancel"]}, {"action": "sync", "after": {"a": 1}},
    {"action": "unqueue", "id": {"a": 1}}, {"action": "edit", "content": "x", "of": {"a": 1}},
    {"action": "regenerate", "of": ["1"]}, {"action": "branch", "id": {"a": 1}},
    {"action": "approve", "id": {"a": 1}}, {"action": "deny", "id": "t1", "reason": {"a": 1}},
]  # fmt: skip


@pytest.mark.parametrize("frame", WRONG_TYPES, ids=lambda frame: json.dumps(frame))
async def test_a_field_of_the_wrong_type_is_refused_and_the_socket_survives(
    alice, model_server, frame
):
    user, conversation = alice
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps(frame))
    reply = await ws.receive_from()
    assert 'data-part="error"' in reply or 'id="composer-alert"' in reply
    assert model_server.requests == []
    model_server.enqueue(text_reply("still alive"))
    await ws.send_to(text_data=json.dumps({"content": "ok?"}))
    assert "still alive" in await collect_until_idle(ws)
    await runs.wait(conversation.id)
    await ws.disconnect()


async def test_binary_frame_gets_an_error_fragment(alice):
    user, conversation = alice
    ws = await connected(conversation, user)
    await ws.send_to(bytes_data=b"\x00\x01")
    assert 'data-part="error"' in await ws.receive_from()
    await ws.disconnect()


async def test_oversized_prompt_is_refused_and_nothing_is_sent(alice, model_server, settings):
    settings.HARNESS_MAX_PROMPT_CHARS = 1000
    user, conversation = alice
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "x" * 1001}))
    reply = await ws.receive_from()
    assert "prompt_too_large" in reply and "1,001" in reply
    assert model_server.requests == []
    await ws.disconnect()


async def test_second_prompt_while_running_is_refused(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("slow " * 60, delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "first"}))
    await ws.receive_from()
    await ws.send_to(text_data=json.dumps({"content": "second"}))
    html = await collect_until_idle(ws)
    assert "prompt_running" in html
    await runs.wait(conversation.id)
    assert len(model_server.requests) == 1
    await ws.disconnect()


async def test_cancel_frame_stops_the_run_and_keeps_partial_text(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("word " * 400, delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "long"}))
    html = ""
    while "live-text" not in html:
        html += await ws.receive_from()
    await ws.send_to(text_data=json.dumps({"action": "cancel", "HEADERS": {}}))
    html += await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert 'data-state="error"' in html and "Cancelled" in html
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.state == "error"
    texts = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation, type="text").values_list(
            "payload", flat=True
        )
    )
    assert len(texts) == 1 and texts[0]["content"].startswith("word")
    await ws.disconnect()


async def test_two_sockets_on_one_conversation_see_the_same_run(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("shared answer"))
    first = await connected(conversation, user)
    second = await connected(conversation, user)
    await first.send_to(text_data=json.dumps({"content": "hello both"}))
    html_first, html_second = await asyncio.gather(
        collect_until_idle(first), collect_until_idle(second)
    )
    await runs.wait(conversation.id)
    for html in (html_first, html_second):
        assert "hello both" in html and "shared answer" in html
    await first.disconnect()
    await second.disconnect()


async def test_deactivating_a_user_closes_their_sockets_and_cancels_their_runs(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("long " * 500, delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "keep going"}))
    html = ""
    while "live-text" not in html:
        html += await ws.receive_from()
    user.is_active = False
    await sync_to_async(user.save)()  # e.g. an admin unticks "active"
    while "signed_out" not in html:
        html += await ws.receive_from()
    assert (await ws.receive_output())["type"] == "websocket.close"
    await runs.wait(conversation.id)
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.state == "error"  # the run was cancelled, not left running


async def test_every_frame_rechecks_the_user_even_without_the_revocation_message(
    alice, model_server
):
    from agent.models import User

    user, conversation = alice
    ws = await connected(conversation, user)
    # A bulk update sends no signal: the per-frame check alone must refuse.
    await sync_to_async(User.objects.filter(pk=user.pk).update)(is_active=False)
    await ws.send_to(text_data=json.dumps({"content": "still here?"}))
    assert "not available" in await ws.receive_from()
    assert (await ws.receive_output())["type"] == "websocket.close"
    assert model_server.requests == []


async def test_signing_out_closes_that_sessions_sockets(alice):
    user, conversation = alice
    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    ws = socket(conversation, cookie)
    assert (await ws.connect())[0]
    await sync_to_async(client.post)("/accounts/logout/")
    assert "signed_out" in await ws.receive_from()
    assert (await ws.receive_output())["type"] == "websocket.close"


async def test_concurrent_run_quota_refuses_a_third_prompt(alice, model_server, settings):
    settings.HARNESS_CONCURRENT_RUNS = 1
    user, conversation = alice
    other = await sync_to_async(Conversation.objects.create)(owner=user, model="m")
    model_server.enqueue(text_reply("slow " * 100, delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "one"}))
    await ws.receive_from()
    ws2 = await connected(other, user)
    await ws2.send_to(text_data=json.dumps({"content": "two"}))
    reply = await ws2.receive_from()
    assert "quota_concurrent" in reply and "1 prompts running" in reply
    await runs.cancel(conversation.id)
    await runs.wait(conversation.id)
    await ws.disconnect()
    await ws2.disconnect()


async def test_rate_quota_refuses_too_many_prompts_a_minute(alice, model_server, settings):
    settings.HARNESS_RUNS_PER_MINUTE = 2
    user, conversation = alice
    ws = await connected(conversation, user)
    for n in range(2):
        model_server.enqueue(text_reply(f"answer {n}"))
        await ws.send_to(text_data=json.dumps({"content": f"prompt {n}"}))
        await collect_until_idle(ws)
        await runs.wait(conversation.id)
    await ws.send_to(text_data=json.dumps({"content": "one too many"}))
    reply = await ws.receive_from()
    assert "quota_rate" in reply and "limit is 2" in reply
    assert len(model_server.requests) == 2
    await ws.disconnect()


async def test_admin_can_turn_bash_off_for_a_user(alice, model_server, settings, monkeypatch):
    settings.HARNESS_BASH = "sandbox"
    monkeypatch.setattr("agent.runs.sandbox.bwrap_path", lambda: "/usr/bin/bwrap")  # offered
    user, conversation = alice
    model_server.enqueue(text_reply("ok"), text_reply("ok"))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "with bash"}))
    await collect_until_idle(ws)
    await runs.wait(conversation.id)
    user.bash_enabled = False
    await sync_to_async(user.save)()
    await ws.send_to(text_data=json.dumps({"content": "without bash"}))
    await collect_until_idle(ws)
    await runs.wait(conversation.id)
    tools = [[t["name"] for t in body["tools"]] for body in model_server.bodies]
    assert "bash" in tools[0] and "bash" not in tools[1]
    await ws.disconnect()


async def test_run_survives_its_socket_disconnecting(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("finished without anyone watching", delay=0.005))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    await ws.receive_from()
    await ws.disconnect()
    await runs.wait(conversation.id)
    kinds = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation).values_list("type", flat=True)
    )
    assert kinds[-3:] == ["text", "usage", "status"]


async def test_sync_returns_exactly_what_follows_the_given_seq(alice, model_server):
    import re

    user, conversation = alice
    model_server.enqueue(tool_reply(("list_dir", {"path": "."})), text_reply("Listed."))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "list"}))
    await collect_until_idle(ws)
    await runs.wait(conversation.id)
    await sync_to_async(conversation.refresh_from_db)()
    stored = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation).values_list("seq", "type")
    )
    call_seq = next(seq for seq, kind in stored if kind == "tool_call")
    await ws.send_to(text_data=json.dumps({"action": "sync", "after": call_seq}))
    reply = await ws.receive_from()
    assert reply.startswith(
        f'<div id="sync-state" hx-swap-oob="true" data-from="{call_seq + 1}" '
        f'data-to="{conversation.last_seq}" data-sync="1" data-drop-live hidden></div>'
    )  # (its answer's text replaces a live block the page may hold)
    shown = {int(s) for s in re.findall(r'data-part="\w+" data-seq="(\d+)"', reply)}
    assert shown and min(shown) > call_seq or f'id="tool-{call_seq}"' in reply
    assert 'data-part="user"' not in reply  # it was before the given seq
    assert "Listed." in reply and f'id="tool-{call_seq}"' in reply  # the card gets its result
    await ws.send_to(text_data=json.dumps({"action": "sync", "after": conversation.last_seq}))
    empty = await ws.receive_from()
    assert "data-part" not in empty and 'data-sync="1"' in empty
    for bad in ('{"action": "sync"}', '{"action": "sync", "after": -1}',
                '{"action": "sync", "after": "3"}'):  # fmt: skip
        await ws.send_to(text_data=bad)
        assert 'data-part="error"' in await ws.receive_from()
    await ws.disconnect()


async def test_partial_text_is_stored_while_streaming_and_caught_up_mid_block(alice, model_server):
    user, conversation = alice
    model_server.enqueue(text_reply("chunk " * 200, delay=0.01))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "stream"}))
    html = ""
    while len(re.findall(r'id="live-(?:open|line|tail)"', html)) < 3:  # started and grown
        html += await ws.receive_from()
    await asyncio.sleep(1.2)  # partial text is stored at least once a second
    rows = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation, type="text_delta").values_list(
            "payload", flat=True)
    )  # fmt: skip
    assert rows and "".join(r["content"] for r in rows).startswith("chunk chunk")
    late = await connected(conversation, user)  # a tab opened mid-block
    await late.send_to(text_data=json.dumps({"action": "sync", "after": 0}))
    reply = await late.receive_from()
    # This socket joined the block's group on connecting: a live frame written to it
    # before its sync frame is handled can come first (the page applies it by seq).
    while 'id="live-text"' not in reply:
        reply = await late.receive_from()
    # The page's own copy of the block, if it has one, goes by the marker's word.
    assert "data-drop-live" in reply and 'id="live-text"' in reply
    assert "delete:#live-text" not in reply
    assert "chunk chunk chunk" in reply
    # A page that already has part of the block gets the block whole, from its start.
    behind = rows[-1]["seq"] - 1  # it has part of the block, not the newest stored frame
    await late.send_to(text_data=json.dumps({"action": "sync", "after": behind}))
    again = await late.receive_from()
    # The block still streams and this socket is in its group: a live frame (an append
    # to the block) can come before the sync reply. Skip those; the reply is what's tested.
    while 'id="live-text"' not in again:
        again = await late.receive_from()
    assert re.search(r'id="live-(?:open|frozen)"[^>]*>(?:<p>)?chunk chunk', again)
    await collect_until_idle(ws)
    await runs.wait(conversation.id)
    leftover = await sync_to_async(
        Event.objects.filter(conversation=conversation, type="text_delta").count
    )()
    assert leftover == 0  # gone once the block completed
    texts = await sync_to_async(list)(
        Event.objects.filter(conversation=conversation, type="text").values_list(
            "payload", flat=True)
    )  # fmt: skip
    assert texts[0]["content"] == "chunk " * 200
    await ws.disconnect()
    await late.disconnect()


async def test_every_batch_carries_its_seq_range_without_gaps(alice, model_server):
    import re

    user, conversation = alice
    model_server.enqueue(
        tool_reply(("list_dir", {"path": "."})), text_reply("x " * 50, delay=0.005)
    )
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "ranges"}))
    ranges = []
    async with asyncio.timeout(10):
        while True:
            message = await ws.receive_from()
            found = re.match(r'<div id="sync-state"[^>]*data-from="(\d+)" data-to="(\d+)"', message)
            if found:
                ranges.append((int(found[1]), int(found[2])))
            if 'data-state="idle"' in message:
                break
    await runs.wait(conversation.id)
    assert ranges[0][0] == 1
    for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
        assert start == end + 1
    await sync_to_async(conversation.refresh_from_db)()
    assert ranges[-1][1] == conversation.last_seq
    await ws.disconnect()


async def test_deltas_are_coalesced_into_frames_of_at_most_one_per_interval(
    alice, model_server, monkeypatch
):
    user, conversation = alice
    rendered = []
    from agent.ui.markdown import render_markdown as real

    def counting(text):
        rendered.append(len(text))
        return real(text)

    monkeypatch.setattr("agent.ui.transcript.render_markdown", counting)
    sent_at = []  # when the writer broadcast each frame (what the interval bounds)
    real_broadcast = runs_module.broadcast

    async def timed_broadcast(conversation_id, events, *args, **kwargs):
        sent_at.append((time.monotonic(), events))
        await real_broadcast(conversation_id, events, *args, **kwargs)

    monkeypatch.setattr(runs_module, "broadcast", timed_broadcast)
    deltas = 300  # 300 deltas 2 ms apart: far more than one per frame interval
    model_server.enqueue(text_reply("x" * deltas, chunk=1, delay=0.002))
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "stream"}))
    frames = []
    async with asyncio.timeout(20):
        while True:
            message = await ws.receive_from(timeout=5)
            frames.append((asyncio.get_running_loop().time(), message))
            if 'data-state="idle"' in message:
                break
    await runs.wait(conversation.id)
    delta_frames = [(t, m) for t, m in frames if "live-text" in m and 'data-part="user"' not in m]
    assert len(delta_frames) < deltas / 3  # coalesced: many deltas per frame
    delta_sends = [t for t, events in sent_at if all(e.type == "text_delta" for e in events)]
    assert len(delta_sends) >= 3
    gaps = [b - a for a, b in zip(delta_sends, delta_sends[1:], strict=False)]
    assert min(gaps) >= MIN_INTERVAL * 0.9  # at most one frame per interval
    streamed = "".join(re.sub(r"<[^>]+>", "", m) for _, m in delta_frames)
    assert streamed.count("x") >= deltas  # every delta arrived (plus the final text)
    assert rendered == [deltas]  # markdown rendered once, for the completed block
    await ws.disconnect()


async def test_streamed_frames_do_not_hop_to_the_sync_thread(alice, model_server, monkeypatch):
    """Channels' dispatch sends every message a consumer handles through the one
    thread-sensitive worker thread (to close stale connections): per frame per socket, that
    would be a queue on one thread. Streamed frames reach the socket from the live feed
    (agent/web/viewers.py), not as messages dispatched to it: only the socket's own
    messages hop (its connect and the prompt it sends)."""
    user, conversation = alice
    hops = []

    async def counting():
        hops.append(1)

    monkeypatch.setattr("channels.consumer.aclose_old_connections", counting)
    model_server.enqueue(text_reply("streamed " * 40, chunk=3, delay=0.002))
    # Named already: a first prompt's name is a notice to the user's pages (one more hop).
    await Conversation.objects.filter(pk=conversation.pk).aupdate(title="Named")
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "go"}))
    html = await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert "streamed" in html and len(hops) == 2  # connect, the prompt: no streamed frame
    await ws.disconnect()


async def test_the_first_delta_goes_out_at_once_not_paced_by_the_status_frame_before_it(
    alice, model_server, monkeypatch
):
    """Frames of text are paced by the last frame of text only: the status frame that
    starts an answer does not make its first token wait (with an interval of 30 s here,
    pacing by it would hold that token for 30 s)."""
    user, conversation = alice
    monkeypatch.setattr(loop_lag, "interval", lambda: 30.0)
    model_server.enqueue(text_reply("x", chunk=1, delay=0.2))  # one delta, its own batch
    ws = await connected(conversation, user)
    await ws.send_to(text_data=json.dumps({"content": "one token"}))
    async with asyncio.timeout(5):
        while "live-text" not in (frame := await ws.receive_from(timeout=5)):
            assert 'data-state="idle"' not in frame  # the delta came before the end
    html = await collect_until_idle(ws)
    await runs.wait(conversation.id)
    assert "x" in html
    await ws.disconnect()


# -- the live feed: one subscription per conversation per process (agent/web/viewers.py) --
def _batch(n: int) -> dict:
    """A broadcast batch as agent/runs/broadcast.py sends it (a run's first, of no events:
    rendered, only its sync marker); its html, as the feed hands it on, naming its seq."""
    return {"type": "conversation.batch", "seq_from": n, "seq_to": n, "run": n,
            "html": f"<frame {n}>", "events": []}  # fmt: skip


async def test_sockets_of_one_process_share_one_subscription_and_see_every_frame(
    alice, model_server
):
    user, conversation = alice
    model_server.enqueue(text_reply("shared " * 30, chunk=3, delay=0.002))
    sockets = [await connected(conversation, user) for _ in range(3)]
    layer, group = get_channel_layer(), group_name(conversation.id)
    assert len(layer.groups[group]) == 1  # one member for the process, not one per socket
    await sockets[0].send_to(text_data=json.dumps({"content": "go"}))
    seen = [await collect_until_idle(ws) for ws in sockets]
    await runs.wait(conversation.id)
    frames = [re.findall(r'data-from="(\d+)"', html) for html in seen]
    assert frames[0] and frames[0] == frames[1] == frames[2]  # every frame, in order, each
    assert all(html.count("shared") >= 30 for html in seen)
    for ws in sockets:
        await ws.disconnect()
    assert group not in layer.groups  # the last socket ended the subscription


async def test_a_conversation_whose_frame_waits_holds_up_no_other_conversations_frames(
    alice, monkeypatch
):
    """Every batch of the process comes through one receiver (agent/web/dispatch.py): a
    frame that waits (a rebuild from the log, a long answer rendered in the worker) must
    wait alone, not in front of every other conversation's."""
    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import broadcast, flushed
    from agent.web.live_frames import LiveFrames

    user, slow = alice
    fast = await Conversation.objects.acreate(owner=user, model="claude-haiku-4-5")
    released = asyncio.Event()
    real_render = LiveFrames.render

    async def render(self, message):
        if str(self.conversation_id) == str(slow.id):
            await released.wait()
        return await real_render(self, message)

    monkeypatch.setattr(LiveFrames, "render", render)
    slow_ws, fast_ws = await connected(slow, user), await connected(fast, user)
    await broadcast(slow.id, [TextDeltaEvent(seq=1, content="held")], run=1)
    await broadcast(fast.id, [TextDeltaEvent(seq=1, content="on time")], run=1)
    await flushed()
    assert (await fast_ws.receive_from(timeout=5)).startswith(str(sync_marker(1, 1)))
    assert await slow_ws.receive_nothing(timeout=0.05)
    released.set()
    assert (await slow_ws.receive_from(timeout=5)).startswith(str(sync_marker(1, 1)))
    await slow_ws.disconnect()
    await fast_ws.disconnect()


async def test_a_streams_next_deltas_reach_the_sockets_feed_before_broadcast_returns(alice):
    """Under load every trip through the event loop's queue costs a turn of the loop: a
    stream's next batch of deltas (nothing to await for its fragments) is rendered and put
    into each socket's feed as it is broadcast, with no task of the subscription between."""
    from agent.core.events import TextDeltaEvent
    from agent.runs.broadcast import broadcast
    from agent.web import viewers

    user, conversation = alice
    ws = await connected(conversation, user)
    await broadcast(conversation.id, [TextDeltaEvent(seq=1, content="first")], run=1)
    assert (await ws.receive_from(timeout=5)).startswith(str(sync_marker(1, 1)))
    (socket,) = viewers._of_loop()[str(conversation.id)].sockets.values()
    await broadcast(conversation.id, [TextDeltaEvent(seq=2, content="next")], run=1)
    message = socket.inbox.queue.get_nowait()  # there already: no turn of the loop
    assert message["html"].startswith(str(sync_marker(2, 2))) and "next" in message["html"]
    socket.inbox.put(message)
    assert "next" in await ws.receive_from(timeout=5)
    await ws.disconnect()


async def test_a_batch_rendered_at_once_never_overtakes_a_message_before_it(alice, monkeypatch):
    """A race: the deltas that follow a finished answer still in the render worker, or a
    branch switch broadcast in the same turn, queue behind it instead of going out at once
    (their own fragments need nothing awaited)."""
    from agent.core.events import TextDeltaEvent, TextEvent
    from agent.runs.broadcast import announce_branch, broadcast

    user, conversation = alice
    started, released = asyncio.Event(), asyncio.Event()

    async def prerender(texts):
        if texts:
            started.set()
            await released.wait()  # a long answer, in the worker

    async def redraw(conversation_id, user):
        return "<redraw>"

    monkeypatch.setattr("agent.web.live_frames.prerender", prerender)
    monkeypatch.setattr("agent.web.socket_frames._redraw", redraw)
    ws = await connected(conversation, user)
    await broadcast(conversation.id, [TextDeltaEvent(seq=1, content="a")], run=1)
    assert (await ws.receive_from(timeout=5)).startswith(str(sync_marker(1, 1)))
    await broadcast(conversation.id, [TextEvent(seq=2, content="a")], run=1)
    await asyncio.wait_for(started.wait(), 5)  # its rendering has started, and waits
    await broadcast(conversation.id, [TextDeltaEvent(seq=3, content="b")], run=1)
    assert await ws.receive_nothing(timeout=0.05)
    released.set()
    for n in (2, 3):
        assert (await ws.receive_from(timeout=5)).startswith(str(sync_marker(n, n)))
    # In one turn: the switch is still in the queue when the next batch comes.
    await announce_branch(conversation.id, 0, 3)
    await broadcast(conversation.id, [TextDeltaEvent(seq=4, content="c")], run=1)
    assert await ws.receive_from(timeout=5) == "<redraw>"
    await ws.disconnect()


async def test_frames_never_overtake_a_message_the_socket_is_still_handling(alice, monkeypatch):
    """A race: frames sent while the socket redraws (a slow handler) or has just taken a
    message off its queue must queue behind it. The redraws take random time; the sender
    yields at random; the page must see every message in the order it was sent."""
    user, conversation = alice
    redraws = iter(range(10_000))

    async def slow_redraw(conversation_id, user):
        await asyncio.sleep(random.choice((0, 0, 0.0005, 0.002)))
        return f"<redraw {next(redraws)}>"

    monkeypatch.setattr("agent.web.socket_frames._redraw", slow_redraw)
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    random.seed(18)
    expected, redrawn = [], 0
    for n in range(400):
        if n % 5 == 0:
            await layer.group_send(group, {"type": "conversation.branch", "active": 0,
                                           "fork_seq": 0, "events": []})  # fmt: skip
            expected.append(f"<redraw {redrawn}>")
            redrawn += 1
        else:
            await layer.group_send(group, _batch(n))
            expected.append(str(sync_marker(n, n)))
        pause = random.choice((0, 0, 1, 2, 3, 0.0002, 0.001, 0.003))
        if isinstance(pause, float):
            await asyncio.sleep(pause)  # the socket catches up: the next frame may go direct
        for _ in range(pause if isinstance(pause, int) else 0):
            await asyncio.sleep(0)  # a few turns of the loop: a message may be in hand
        while any(queue.qsize() > 50 for queue in layer.channels.values()):
            await asyncio.sleep(0.001)  # (a queue of 100 drops what comes on top)
    received = []
    for _ in expected:
        try:
            received.append(await ws.receive_from(timeout=5))
        except TimeoutError:
            break
    assert received == expected
    await ws.disconnect()


async def test_a_batch_lost_by_the_layer_is_filled_from_the_log_before_the_next(
    alice, model_server
):
    """The socket's feed (agent/web/feed.py) sees a batch that does not continue the last
    one: what the log holds in between goes out first, as a sync's answer."""
    user, conversation = alice
    model_server.enqueue(text_reply("stored answer"))
    first = await connected(conversation, user)
    await first.send_to(text_data=json.dumps({"content": "go"}))
    await collect_until_idle(first)
    await runs.wait(conversation.id)
    await first.disconnect()
    last = (await Conversation.objects.aget(id=conversation.id)).last_seq
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    await layer.group_send(group, _batch(1))
    assert await ws.receive_from(timeout=5) == str(sync_marker(1, 1))
    await layer.group_send(group, _batch(last + 1))  # 2..last never came
    filled = await ws.receive_from(timeout=5)
    assert filled.startswith(str(sync_marker(2, last, reply=True, drop_live=True)))
    assert "stored answer" in filled
    assert await ws.receive_from(timeout=5) == str(sync_marker(last + 1, last + 1))
    await ws.disconnect()


async def test_a_socket_whose_task_ends_in_an_error_leaves_the_feed(alice):
    user, conversation = alice
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    assert len(layer.groups[group]) == 1
    await layer.group_send(group, {"type": "no.such.handler"})
    with pytest.raises(ValueError, match="No handler"):
        await ws.receive_output(timeout=5)
    await asyncio.sleep(0.05)
    assert group not in layer.groups


async def test_a_socket_cancelled_by_the_server_leaves_the_feed_and_its_channel_expires(
    alice, monkeypatch
):
    """Daphne cancels a socket's task that outlives its client (a slow handler): no
    disconnect() runs. It leaves the conversation's feed, and messages for its own channel
    queue, expire, and take it out of its groups, as for any channel no one reads."""
    from agent.web import consumers
    from agent.web.revocation import user_group

    user, conversation = alice
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    (channel,) = layer.groups[user_group(user.pk)]

    release = threading.Event()

    def slow(*args):  # a credential check that hangs (in its worker thread)
        release.wait(30)
        return None, None, "owner"

    monkeypatch.setattr(consumers, "socket_access", slow)
    try:
        await ws.send_to(text_data=json.dumps({"action": "sync", "after": 0}))
        await asyncio.sleep(0.1)
        ws.future.cancel()  # what Daphne's application checker does
        await asyncio.sleep(0.1)
        assert group not in layer.groups
        monkeypatch.setattr(layer, "expiry", 0.05)
        for _ in range(5):
            await layer.group_send(user_group(user.pk), {"type": "session.recheck"})
            await asyncio.sleep(0.1)
        assert channel not in layer.groups.get(user_group(user.pk), {})
    finally:
        release.set()


async def test_a_live_frame_is_written_without_the_socket_pausing():
    """The feed hands frames to its sockets one after another: a pause in one would hold
    up the others. Stepped once, it must finish."""
    from agent.web.consumers import ConversationConsumer

    written = []

    async def send(message):  # as Daphne's: writes to the transport, returns
        written.append(message["text"])

    consumer = ConversationConsumer()
    consumer.base_send = send
    consumer.refused = False
    step = consumer.write(Batch(_batch(1), []))
    with pytest.raises(StopIteration) as finished:
        step.send(None)
    assert finished.value is not None and written == ["<frame 1>"]


async def test_a_burst_of_shared_list_notices_redraws_once_now_and_once_at_the_end(
    alice, monkeypatch
):
    """Opening a conversation to the team and closing it, over and over, reaches every open
    page: each socket redraws "Shared with me" at once, then at most once per interval,
    with the list as it is by then (not once per notice: that many queries per page)."""
    import agent.web.consumers as consumers
    from agent.models import Membership
    from agent.web.revocation import EVERYONE_GROUP

    monkeypatch.setattr(consumers, "REDRAW_SECONDS", 0.5)
    user, conversation = alice
    bob = await sync_to_async(make_user)("bob")
    bobs = await Conversation.objects.acreate(owner=bob, title="Bob's notes")
    ws = await connected(conversation, user)
    layer = get_channel_layer()
    for n in range(20):
        if n == 10:  # the list changes mid-burst: the last redraw shows it
            await Membership.objects.acreate(conversation=bobs, user=user, role="viewer")
        await layer.group_send(EVERYONE_GROUP, {"type": "shared.changed"})
    redraws = await frames_holding(ws, 'id="shared-list"', 1.5)
    assert len(redraws) == 2, len(redraws)
    assert "Bob&#x27;s notes" in redraws[-1] or "Bob's notes" in redraws[-1]
    await ws.disconnect()


async def test_a_redraw_that_fails_is_drawn_after_the_pause_not_lost(alice, monkeypatch):
    """A redraw whose query failed (a busy database) ended the redrawing task with the
    notice in it: the page kept a stale "Shared with me" until the next notice."""
    import agent.web.consumers as consumers
    from agent.web.revocation import user_group

    monkeypatch.setattr(consumers, "REDRAW_SECONDS", 0.3)
    real, calls = consumers.shared_list, []

    def busy_once(user):
        calls.append(user)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return real(user)

    monkeypatch.setattr(consumers, "shared_list", busy_once)
    user, conversation = alice
    ws = await connected(conversation, user)
    await get_channel_layer().group_send(user_group(user.pk), {"type": "shared.changed"})
    redraws = await frames_holding(ws, 'id="shared-list"', 1.2)
    assert len(calls) == 2 and len(redraws) == 1, (len(calls), len(redraws))
    await ws.disconnect()


async def test_a_redraw_that_keeps_failing_is_given_up_after_its_tries(alice, monkeypatch):
    """A lasting fault is not retried (and logged) for as long as the socket lives."""
    import agent.web.consumers as consumers
    from agent.web.revocation import user_group

    monkeypatch.setattr(consumers, "REDRAW_SECONDS", 0.1)
    calls = []

    def broken(user):
        calls.append(user)
        raise RuntimeError("a lasting fault")

    monkeypatch.setattr(consumers, "shared_list", broken)
    user, conversation = alice
    ws = await connected(conversation, user)
    await get_channel_layer().group_send(user_group(user.pk), {"type": "shared.changed"})
    await asyncio.sleep(1.0)
    assert len(calls) == consumers.REDRAW_TRIES
    await ws.disconnect()


async def test_the_owners_list_notices_make_the_page_fetch_its_list_coalesced(alice, monkeypatch):
    """Another tab's archive, pin, rename or delete: the socket swaps in the element that
    fetches the page's own list again (in its view), at once, then at most once per
    interval however many notices come."""
    import agent.web.consumers as consumers
    from agent.web.revocation import user_group

    monkeypatch.setattr(consumers, "REDRAW_SECONDS", 0.5)
    user, conversation = alice
    ws = await connected(conversation, user)
    layer = get_channel_layer()
    for _ in range(10):
        await layer.group_send(user_group(user.pk), {"type": "own_list.changed"})
    refreshes = await frames_holding(ws, 'id="conv-list-refresh"', 1.5)
    assert len(refreshes) == 2, len(refreshes)
    assert f'hx-get="/c/{conversation.pk}/list"' in refreshes[0]
    assert 'hx-include="#conv-list-view"' in refreshes[0] and "hx-swap-oob" in refreshes[0]
    await ws.disconnect()


async def test_the_header_follows_the_row_whatever_order_its_notices_arrive_in(alice):
    """The review: archived and brought back at once from two places (two processes), the
    notices may arrive in either order, and a page drawing what each said could end showing
    "Archived" for a conversation that is not. Each notice draws the row as it is now."""
    user, conversation = alice
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    await Conversation.objects.filter(pk=conversation.pk).aupdate(archived=False, title="Now")
    # The late notice of an earlier archive, and of an earlier name.
    await layer.group_send(group, {"type": "conversation.archived", "archived": True})
    frame = ""
    async with asyncio.timeout(10):
        while 'id="archived-mark"' not in frame:
            frame = await ws.receive_from(timeout=10)
    assert re.search(r'id="archived-mark"[^>]*\shidden', frame), frame
    await layer.group_send(group, {"type": "conversation.renamed", "title": "Before"})
    async with asyncio.timeout(10):
        while 'id="conv-title"' not in frame:
            frame = await ws.receive_from(timeout=10)
    assert ">Now<" in frame and "Before" not in frame, frame
    await ws.disconnect()


async def test_a_burst_of_header_notices_is_drawn_once_now_and_once_at_the_end(alice, monkeypatch):
    """Archive and unarchive, rename and rename again, as fast as a script can: each open
    page reads the row and redraws its header at once, then at most once per interval (as
    the row is by then), not once per notice (a query per notice per open page)."""
    import agent.web.consumers as consumers

    monkeypatch.setattr(consumers, "REDRAW_SECONDS", 0.5)
    user, conversation = alice
    ws = await connected(conversation, user)
    layer, group = get_channel_layer(), group_name(conversation.id)
    for n in range(10):
        await layer.group_send(group, {"type": "conversation.archived", "archived": n % 2 == 0})
        await layer.group_send(group, {"type": "conversation.renamed", "title": f"Name {n}"})
    await Conversation.objects.filter(pk=conversation.pk).aupdate(archived=True, title="Last")
    frames = await frames_holding(ws, "", 1.5)
    marks = [frame for frame in frames if 'id="archived-mark"' in frame]
    titles = [frame for frame in frames if 'id="conv-title"' in frame]
    assert len(marks) <= 2 and len(titles) <= 2, (len(marks), len(titles))
    assert ">Last<" in titles[-1], titles
    assert not re.search(r'id="archived-mark"[^>]*\shidden', marks[-1]), marks[-1]
    await ws.disconnect()


async def test_a_socket_whose_feed_fails_closes_with_a_code_the_page_retries(alice, monkeypatch):
    """The feed failing on the server (a bug, a database gone) closed the socket with 1000,
    after which no page reconnects: it sat on "Reconnecting…" with a dead socket. It closes
    with 1011, which the page's transport retries (then syncs)."""
    import agent.web.consumers as consumers

    async def failing(self):
        raise RuntimeError("the feed broke")
        yield  # an async generator, as the feed's items are

    monkeypatch.setattr(consumers.ConversationFeed, "items", failing)
    user, conversation = alice
    ws = await connected(conversation, user)
    async with asyncio.timeout(10):
        while True:
            output = await ws.receive_output(timeout=10)
            if output["type"] == "websocket.close":
                break
    assert output.get("code") == 1011


async def test_a_terminals_start_announced_wakes_the_sockets_tails_at_once(alice, monkeypatch):
    """A shell's or a CLI's start, announced in any process (its id as the run layer holds
    it, a string), reaches each socket on the conversation: its tails look at their panes
    now, not at their next idle look seconds later."""
    from agent.runs.groups import announce_terminal
    from agent.web import terminal_tail

    looks = []
    step = terminal_tail.Tail.step

    async def counted(tail):
        looks.append(tail.pane.name)
        return await step(tail)

    monkeypatch.setattr(terminal_tail.Tail, "step", counted)
    user, conversation = alice
    ws = await connected(conversation, user)
    try:
        async with asyncio.timeout(5):
            while not looks:  # the first look, on connecting: no session yet
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert looks == ["shell"]
        await announce_terminal(str(conversation.id))
        async with asyncio.timeout(terminal_tail.IDLE_POLL / 2):
            while len(looks) < 2:
                await asyncio.sleep(0.01)
    finally:
        await ws.disconnect()
