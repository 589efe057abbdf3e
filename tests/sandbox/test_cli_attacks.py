"""The CLI agents' attacks of the security review, replayed against a root server with its
broker: each CLI's home is the user's own, per conversation, in the user's storage and
written as the user; each CLI runs as the user's uid in the user's cgroup; nothing in a
sandbox or a conversation's other homes can be read or planted from another."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

import pytest

from testkit.api_client import Api
from testkit.model_server import text_reply, tool_reply
from tests.cli_agents import cli_live_server
from tests.web.test_cli_agents_live import prompt_and_read, script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)"),
]


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    with cli_live_server(tmp_path_factory.mktemp("cli-attacks"), model.url, "the-real-key",
                         HARNESS_RUNS_PER_MINUTE="100") as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def alice(live):
    return Api(live.url, live.manage("create_api_token", "alice").strip())


def _user_id(live) -> int:
    code = "from agent.models import User; print(User.objects.get(username='alice').pk)"
    return int(live.manage("shell", "-c", code).split()[-1])


def _home(live, conversation_id: str) -> Path:
    return (live.root / "workspaces" / str(_user_id(live)) / ".harness-cli"
            / conversation_id.replace("-", ""))  # fmt: skip


def _plant_link(path: Path, target: Path, uid: int) -> None:
    """What a process of the user's could have left there (were the homes in its reach)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    path.symlink_to(target)
    os.lchown(path, uid, uid)
    for parent in [path.parent, *path.parents]:
        if parent == live_root_of(path):
            break
        os.lchown(parent, uid, uid)


def live_root_of(path: Path) -> Path:
    return next(p for p in path.parents if p.name == "workspaces").parent


def test_a_link_in_a_cli_home_cannot_make_root_write_or_chown(live, alice, model):
    """Finding 1: a link planted at the config file's name, then a CLI start, overwrote a
    root-only file and chowned root's files. The home is now written by the user's own
    file host, as the user: a link to root's file is not followed, root's files stay as
    they were, and the start fails with a reason instead."""
    conversation = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
    uid = 200_000 + _user_id(live)
    secret = live.root / "root-only.txt"
    secret.write_text("root's own")
    secret.chmod(0o600)
    closed = live.root / "root-only-dir"
    closed.mkdir(mode=0o700, exist_ok=True)
    home = _home(live, conversation)
    _plant_link(home / ".pi" / "agent" / "models.json", secret, uid)
    _plant_link(home / ".pi" / "agent" / "escape", closed, uid)
    script(model, text_reply("answered"))
    events = prompt_and_read(alice, conversation, "start it")
    assert secret.read_text() == "root's own" and secret.stat().st_uid == 0
    assert list(closed.iterdir()) == [] and closed.stat().st_uid == 0
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    status = events[-1]
    assert status["state"] == "error" and "outside the workspace" in status.get("message", "")


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process under it, as the process table says now."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit():
                # the parent's pid follows the command's name, which may hold spaces
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo += [child for child in parents.get(current, []) if child not in found]
    return found


def test_the_cli_runs_as_the_user_in_the_users_cgroup_with_a_home_per_conversation(
    live, alice, model
):
    """Findings 2, 3, 5: the CLI's processes are the user's uid, in the user's cgroup;
    its home is in the user's own storage, one per conversation, and another
    conversation's home is not in its reach."""
    first = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
    second = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
    script(model, text_reply("one"))
    prompt_and_read(alice, first, "hello")
    command = ("id -u; ls -A /workspace/.harness-cli | wc -l; ls ~/.pi/sessions; "
               "touch /workspace/.harness-cli/planted 2>&1 || echo refused")  # fmt: skip
    script(model, tool_reply(("bash", {"command": command})), text_reply("listed"))
    events = prompt_and_read(alice, second, "look around")
    result = next(e for e in events if e["type"] == "tool_result")["result"]
    uid = 200_000 + _user_id(live)
    lines = result.split("\n")
    assert lines[0] == str(uid) and lines[1] == "0", result
    assert first not in result and "refused" in result, result
    assert _home(live, first).is_dir() and _home(live, second).is_dir()
    assert not (_home(live, first).parent / "planted").exists()
    cgroups = []
    # This server's alone: another test's server on the machine has users of the same ids.
    ours = _descendants(live.process.pid)
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and int(entry.name) in ours and entry.stat().st_uid == uid:
                cgroups.append((entry / "cgroup").read_text())
    assert cgroups
    enforced = [c for c in cgroups if "/harness/" in c]
    if not enforced:
        pytest.skip("cgroups are not available to the broker on this host")
    assert len(enforced) == len(cgroups)
    # CPU is shared per workspace where the host has the controller: the user's processes
    # sit in their workspace's cpu cgroup, weighed equally with every other user's.
    if any(":cpu" in line for line in Path("/proc/self/cgroup").read_text().splitlines()):
        for text in cgroups:
            cpu = [line for line in text.splitlines() if "cpu" in line.split(":")[1].split(",")]
            assert cpu and all("/harness/ws-" in line for line in cpu), text


def test_the_built_in_agent_cannot_reach_the_cli_homes(live, alice, model):
    """Finding 5: a collaborator's built-in agent (bash, file tools) in the owner's
    workspace cannot read a CLI home nor plant a program in one."""
    cli = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
    script(model, text_reply("made"))
    prompt_and_read(alice, cli, "hello")
    conversation = alice.call("POST", "/api/conversations", {})[1]["id"]
    hex_id = cli.replace("-", "")
    script(model, tool_reply(("bash", {"command": "ls -A .harness-cli | wc -l; mkdir -p "
                                       f".harness-cli/{hex_id}/.pi 2>&1 || echo refused"}),
                             ("read", {"path": f".harness-cli/{hex_id}/.pi/agent/models.json"})),
           text_reply("tried"))  # fmt: skip
    events = prompt_and_read(alice, conversation, "snoop")
    bash, read = [e for e in events if e["type"] == "tool_result"][:2]
    assert json.loads(bash["result"])["output"].startswith("0\n") and "refused" in bash["result"]
    assert read["isError"] and "reserved" in read["result"]


def test_a_search_of_the_whole_workspace_finds_nothing_in_the_cli_homes(live, alice, model):
    """The review's attack: a conversation's recursive grep from the workspace's root read
    another conversation's CLI transcript."""
    cli = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
    script(model, text_reply("my PIN-TO-HIDE is 9911"))
    prompt_and_read(alice, cli, "remember PIN-TO-HIDE")
    conversation = alice.call("POST", "/api/conversations", {})[1]["id"]
    script(model, tool_reply(("grep", {"pattern": "PIN-TO-HIDE", "path": ".",
                                       "recursive": True}),
                             ("list_dir", {"path": "."})),
           text_reply("searched"))  # fmt: skip
    events = prompt_and_read(alice, conversation, "search")
    grep, listing = [e for e in events if e["type"] == "tool_result"][:2]
    assert not grep["isError"] and "PIN-TO-HIDE" not in grep["result"], grep
    assert _home(live, cli).is_dir()


def test_where_bash_is_off_the_cli_agents_are_too(live, alice, model):
    """The review's attack: a user whose bash an admin switched off ran commands through a
    CLI agent's own shell tool."""
    code = ("from agent.models import User; "
            "User.objects.filter(username='alice').update(bash_enabled=False)")  # fmt: skip
    live.manage("shell", "-c", code)
    try:
        cli = alice.call("POST", "/api/conversations", {"agent": "pi"})[1]["id"]
        status, body = alice.call("POST", f"/api/conversations/{cli}/prompt",
                                  {"content": "run something"})  # fmt: skip
        assert status == 403 and "commands are switched off" in body["message"], body
    finally:
        live.manage("shell", "-c", code.replace("False", "True"))


def test_a_cli_agent_in_a_project_works_in_its_worktree_with_checkpoints(live, alice, model):
    """A CLI runs its own commands: it sees the conversation's worktree (git works there),
    not the user's workspace, and what its calls changed is checkpointed."""
    project = alice.call("POST", "/api/projects", {"name": "cli"})[1]["id"]
    status, made = alice.call("POST", "/api/conversations", {"agent": "pi", "project": project})
    assert status == 201, made
    command = "echo cli > made.txt; git status --short; ls -A /workspace | tr '\\n' ' '"
    script(model, tool_reply(("bash", {"command": command})), text_reply("done"))
    events = prompt_and_read(alice, made["id"], "go")
    result = next(e for e in events if e["type"] == "tool_result")
    assert "?? made.txt" in result["result"] and ".harness-cli" not in result["result"], result
    # Taken once the CLI's result is read, and streamed before the turn's final status
    # (which waits for it), in the run's order.
    taken = [e for e in events if e["type"] == "checkpoint" and e["files"]]
    assert taken and taken[-1]["files"] == ["made.txt"], events
    assert events[-1]["type"] == "status" and events[-1]["state"] == "idle", events
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
