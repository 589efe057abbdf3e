"""Privilege separation against a real root server: Daphne drops to the service user, its
broker alone keeps root, and users' files and commands are reached as each user's uid."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.conftest import require_bwrap
from tests.web.test_cli_agents_live import prompt_and_read

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("privsep"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url,
                        HARNESS_RUNS_PER_MINUTE="1000")  # fmt: skip
    server.start()
    server.create_users("alice", "bob")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


def _status(pid: int) -> dict[str, list[int]]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Uid", "Gid", "Groups"):
            fields[name] = [int(v) for v in value.split()]
    return fields


def _descendants(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_the_server_holds_no_root_and_only_its_broker_does(live):
    status = _status(live.process.pid)
    assert 0 not in status["Uid"] and 0 not in status["Gid"], status
    assert status["Groups"] in ([], [status["Gid"][0]]), status
    children = _descendants(live.process.pid)
    rooted = [pid for pid in children if 0 in _status(pid)["Uid"]]
    assert len(rooted) == 1, (children, rooted)
    cmdline = Path(f"/proc/{rooted[0]}/cmdline").read_bytes().split(b"\0")
    assert b"agent.sandbox.broker" in cmdline


def _results(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "tool_result"]


def test_tools_and_bash_run_as_the_users_own_uid(live, alice, fresh):
    _, conversation = alice.call("POST", "/api/conversations", {})
    fresh.enqueue(
        tool_reply(("write", {"path": "notes/a.txt", "content": "hello\n"}),
                   ("bash", {"command": "id -u; stat -c %u notes/a.txt; cat notes/a.txt"}),
                   ("read", {"path": "notes/a.txt"}),
                   ("grep", {"pattern": "hel", "path": "notes", "recursive": True}),
                   ("list_dir", {"path": "notes"})),
        text_reply("done"),
    )  # fmt: skip
    results = _results(prompt_and_read(alice, conversation["id"], "go"))
    assert [r["isError"] for r in results] == [False] * 5, [r["result"] for r in results]
    uid = live_uid(live, "alice")
    assert json.loads(results[1]["result"])["output"] == f"{uid}\n{uid}\nhello\n"
    assert "hello" in results[2]["result"] and "notes/a.txt:1:hello" in results[3]["result"]
    path = Path(live.root / "workspaces" / str(_user_id(live, "alice")) / "notes" / "a.txt")
    assert path.stat().st_uid == uid


def test_bash_has_a_private_tmp_it_can_write(live, alice, fresh):
    """pip, compilers and test runners write TMPDIR: the sandbox's /tmp is the user's to
    write (sticky, like a host's), and not shared with the host's."""
    _, conversation = alice.call("POST", "/api/conversations", {})
    command = "echo scratch > /tmp/a && cat /tmp/a && stat -c %a /tmp && mktemp -d | head -c 5"
    fresh.enqueue(tool_reply(("bash", {"command": command})), text_reply("done"))
    (result,) = _results(prompt_and_read(alice, conversation["id"], "go"))
    assert not result["isError"], result["result"]
    assert json.loads(result["result"])["output"] == "scratch\n1777\n/tmp/"
    assert not Path("/tmp/a").exists() or Path("/tmp/a").read_text() != "scratch\n"


def test_a_symlink_to_a_root_file_gives_the_user_nothing(live, alice, fresh):
    """What code might forget, the kernel refuses: the file host is the user."""
    _, conversation = alice.call("POST", "/api/conversations", {})
    secret = live.root / "root-only"
    secret.write_text("root's secret")
    secret.chmod(0o600)
    fresh.enqueue(
        tool_reply(("bash", {"command": "ln -sf /proc/1/root/etc/shadow shadow; echo ok"})),
        tool_reply(("read", {"path": "shadow"})),
        text_reply("done"),
    )  # fmt: skip
    results = _results(prompt_and_read(alice, conversation["id"], "go"))
    assert results[-1]["isError"]
    assert "root:" not in results[-1]["result"], results[-1]["result"]


def live_uid(live, name: str) -> int:
    return 200_000 + _user_id(live, name)


def _user_id(live, name: str) -> int:
    code = f"from agent.models import User; print(User.objects.get(username={name!r}).pk)"
    return int(live.manage("shell", "-c", code).split()[-1])


def test_the_health_check_runs_its_command_through_the_broker(live):
    """/healthz's sandbox self-test takes the real spawn path: the broker, a uid no user has."""
    import urllib.request

    with urllib.request.urlopen(f"{live.url}/healthz", timeout=10) as response:
        assert json.loads(response.read())["sandbox"] == "ok"
    assert "bash sandbox self-test: ok" in live.log.read_text()


def test_the_panes_socket_is_bound_in_a_state_directory_that_did_not_exist(tmp_path):
    """The broker binds the panes' socket (Terminal, CLI agents) in HARNESS_AGENT_STATE as it
    starts: the server makes that directory before starting it, not after (the bind lost
    that race now and then, and no pane of that server could attach)."""
    require_bwrap()
    state = tmp_path / "not" / "yet" / "state"
    server = LiveServer(tmp_path / "server", HARNESS_AGENT_STATE=str(state))
    (tmp_path / "server").mkdir()
    server.start()
    try:
        deadline = time.monotonic() + 10
        while not list(state.glob("broker-*.sock")):
            assert time.monotonic() < deadline, server.log.read_text()[-2000:]
            time.sleep(0.05)
        assert "Traceback" not in server.log.read_text()
    finally:
        server.stop()
