"""Choosing a CLI agent on the page, and the life cycle of its tmux session (docs/API.md):
ended when the conversation is deleted and when unused for HARNESS_AGENT_IDLE_MINUTES."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time

import pytest

from agent.core.cli_agents import detect, providers
from agent.models import Conversation
from agent.runs import claim as claims
from agent.runs import cli_sessions
from agent.runs.claim import RunRefused

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake_claude(tmp_path, settings):
    """A stand-in for the claude executable that answers --version (no sandbox or model is
    involved in these tests; the real CLI runs in test_cli_agents_live.py)."""
    cli = tmp_path / "claude"
    cli.write_text("#!/bin/sh\necho '2.1.197 (Claude Code)'\n")
    cli.chmod(0o755)
    settings.HARNESS_AGENT_COMMANDS = {**settings.HARNESS_AGENT_COMMANDS, "claude-code": str(cli)}
    settings.HARNESS_AGENT_STATE = tmp_path / "cli"
    settings.ANTHROPIC_API_KEY = "sk-ant-test"  # (a CLI needs a real model)
    detect._cache.clear()
    yield cli
    detect._cache.clear()


def test_the_page_offers_only_available_agents_and_creates_a_conversation_with_one(
    client, ada, fake_claude
):
    first = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{first.id}/").content.decode()
    assert 'id="new-agent"' in page and '<option value="claude-code">' in page
    assert '"codex"' not in page and '"opencode"' not in page
    response = client.post("/c/new/", {"agent": "claude-code"})
    made = Conversation.objects.exclude(id=first.id).get(owner=ada)
    assert response.status_code == 302 and made.agent == "claude-code"
    assert "agent-badge" in client.get(f"/c/{made.id}/").content.decode()


@pytest.mark.parametrize("agent", ["codex", "no-such-agent", "pi"])
def test_an_unavailable_agent_is_refused_and_nothing_is_made(client, ada, fake_claude,
                                                             settings, agent):  # fmt: skip
    settings.HARNESS_AGENT_COMMANDS = {**settings.HARNESS_AGENT_COMMANDS,
                                       "pi": "/nonexistent/pi"}  # fmt: skip
    response = client.post("/c/new/", {"agent": agent})
    assert response.status_code == 400
    assert not Conversation.objects.filter(owner=ada).exists()


def test_without_a_model_key_no_cli_agent_is_offered_or_made(client, ada, fake_claude, settings):
    """The offline demo answers only the built-in agent: a CLI would retry the gateway's
    refusal for minutes (the first-use review's finding)."""
    settings.ANTHROPIC_API_KEY = None
    first = Conversation.objects.create(owner=ada, model="m")
    page = client.get(f"/c/{first.id}/").content.decode()
    assert '<option value="claude-code">' not in page
    response = client.post("/c/new/", {"agent": "claude-code"})
    assert response.status_code == 400 and "need a real model" in response.content.decode()
    listed = {a["name"]: a for a in asyncio.run(cli_sessions.agents())}
    assert not listed["claude-code"]["available"]
    assert "ANTHROPIC_API_KEY" in listed["claude-code"]["reason"]
    assert list(Conversation.objects.filter(owner=ada)) == [first]


@pytest.mark.django_db(transaction=True)
def test_a_cli_conversation_without_a_model_key_is_refused_at_once_holding_nothing(
    ada, fake_claude, settings
):
    """A CLI conversation made while the deployment had a key: its prompt is refused before
    the claim, so the user's run slot is never held."""
    settings.ANTHROPIC_API_KEY = None
    settings.HARNESS_CONCURRENT_RUNS = 1
    made = Conversation.objects.create(owner=ada, model="m", agent="claude-code")
    with pytest.raises(RunRefused) as refused:
        asyncio.run(claims.claim(made.id, ada.pk, "list files"))
    assert refused.value.code == "agent_unavailable"
    assert refused.value.message == claims.CLI_NEEDS_MODEL
    made.refresh_from_db()
    assert made.state == Conversation.State.IDLE and made.last_seq == 0
    builtin = Conversation.objects.create(owner=ada, model="m")
    setup = asyncio.run(claims.claim(builtin.id, ada.pk, "hello"))  # the one slot is free
    assert setup.config.offline
    asyncio.run(claims.release(builtin.id))


def _tmux(socket, *args):
    return subprocess.run(["tmux", "-S", str(socket), *args], capture_output=True, text=True)


@pytest.fixture
def tmux_socket(fake_claude, settings):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    settings.HARNESS_AGENT_STATE.mkdir(parents=True)
    socket = settings.HARNESS_AGENT_STATE / "tmux.sock"
    yield socket
    _tmux(socket, "kill-server")


def test_deleting_the_conversation_ends_its_tmux_session(client, ada, tmux_socket):
    conversation = Conversation.objects.create(owner=ada, model="m", agent="claude-code")
    other = Conversation.objects.create(owner=ada, model="m", agent="claude-code")
    for c in (conversation, other):
        assert (
            _tmux(tmux_socket, "new-session", "-d", "-s", f"ah-{c.id}", "sleep 300").returncode == 0
        )
    client.post(f"/c/{conversation.id}/delete")
    sessions = _tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").stdout.split()
    assert sessions == [f"ah-{other.id}"]


def test_sessions_unused_for_the_idle_time_are_ended_and_used_ones_kept(tmux_socket, settings):
    from agent.core.cli_agents.session import CliSession, SessionSpec
    from agent.runs.cli_sessions import CliSessions, Entry
    from agent.runs.llm_gateway import open_gateway

    settings.HARNESS_AGENT_IDLE_MINUTES = 1
    registry = CliSessions()

    async def scenario():
        made = {}
        for key, idle in (("old", 61.0), ("fresh", 5.0)):
            spec = SessionSpec(key, providers.PROVIDERS["claude-code"], "/bin/true", "/", "/",
                               str(settings.HARNESS_AGENT_STATE / key), prefix="ah")  # fmt: skip
            session = CliSession(registry.tmux(), spec)
            await session.tmux.run("new-session", "-d", "-s", session.name, "sleep 300")
            session.last_used -= idle
            gateway = await open_gateway(key, 1)
            registry._entries[key] = made[key] = Entry(session, gateway, spec.provider)
        ended = await registry.reap_idle()
        await made["fresh"].gateway.close()
        return ended, made["old"].gateway

    ended, old_gateway = asyncio.run(scenario())
    assert ended == ["old"]
    assert not os.path.exists(old_gateway._directory)  # its model socket went with it
    sessions = _tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").stdout.split()
    assert sessions == ["ah-fresh"]


def test_orphaned_sessions_end_after_the_idle_time_and_live_ones_stay(tmux_socket, settings):
    """The start-up scan: a session no process uses (its server stopped) ends once
    tmux saw no activity in it for HARNESS_AGENT_IDLE_MINUTES."""
    from agent.runs.cli_sessions import CliSessions

    settings.HARNESS_AGENT_IDLE_MINUTES = 1
    registry = CliSessions()
    for name in ("ah-orphan", "ah-recent", "someone-elses"):
        assert _tmux(tmux_socket, "new-session", "-d", "-s", name, "sleep 300").returncode == 0

    async def scenario():
        assert await registry.reap_orphans() == []  # all just active
        real = time.time
        time.time = lambda: real() + 120  # two minutes later, nothing happened in them
        try:
            return await registry.reap_orphans()
        finally:
            time.time = real

    assert sorted(asyncio.run(scenario())) == ["orphan", "recent"]
    assert _tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").stdout.split() == [
        "someone-elses"
    ]
