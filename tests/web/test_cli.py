"""`python manage.py agent` print mode (docs/API.md), run as a real subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testkit.model_server import HttpError, text_reply, tool_reply
from tests.conftest import REPO


def agent_env(model_server=None, **extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "HARNESS_"))}
    env.update({"DJANGO_DEBUG": "1", "HARNESS_BASH": "off", "PYTHONUNBUFFERED": "1"})
    if model_server is not None:
        env.update({"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": model_server.url})
    env.update(extra)
    return env


def agent(*args, env, stdin=subprocess.DEVNULL, input=None, cwd=None, timeout=60):
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "agent", *args],
        env=env, stdin=None if input is not None else stdin, input=input,
        capture_output=True, text=True, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def test_cli_prints_streamed_text_and_exits_0(model_server, workspace):
    model_server.enqueue(text_reply("Hello from the model."))
    proc = agent("say hello", "--workspace", str(workspace.root), env=agent_env(model_server))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello from the model.\n"
    assert model_server.bodies[0]["messages"][0]["content"][0]["text"] == "say hello"


def test_cli_events_prints_every_event_as_json_lines(model_server, workspace):
    (workspace.root / "f.txt").write_text("data")
    model_server.enqueue(tool_reply(("read", {"path": "f.txt"}), text="Reading."), text_reply("ok"))
    proc = agent("--events", "--workspace", str(workspace.root), "read f.txt",
                 env=agent_env(model_server))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all({"type", "seq", "timestamp"} <= set(e) for e in events)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "user" and "text_delta" in kinds and "usage" in kinds
    assert [k for k in kinds if k in ("text", "tool_call", "tool_result")] == [
        "text", "tool_call", "tool_result", "text",
    ]  # fmt: skip
    assert events[-1] == {**events[-1], "type": "status", "state": "idle"}
    call = next(e for e in events if e["type"] == "tool_call")
    assert call["name"] == "read" and call["input"] == {"path": "f.txt"}
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["isError"] is False and json.loads(result["result"]) == {"content": "data"}


def test_cli_piped_stdin_is_one_prompt(model_server, workspace):
    model_server.enqueue(text_reply("got it"))
    proc = agent("--workspace", str(workspace.root), env=agent_env(model_server),
                 input="line one\nline two\nline three\n")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(model_server.requests) == 1
    sent = model_server.bodies[0]["messages"][0]["content"][0]["text"]
    assert sent == "line one\nline two\nline three"


def test_cli_api_error_exits_1_with_the_message_on_stderr(model_server, workspace):
    model_server.enqueue(HttpError(401, "authentication_error", "invalid x-api-key"))
    proc = agent("hi", "--workspace", str(workspace.root), env=agent_env(model_server))
    assert proc.returncode == 1
    assert "invalid x-api-key" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "args",
    [
        [],  # no prompt and stdin is not a terminal but empty
        ["--tools", "read,teleport", "hi"],
        ["--max-turns", "0", "hi"],
        ["--max-turns", "many", "hi"],
        ["--workspace", "/nonexistent/dir", "hi"],
        ["--no-such-flag", "hi"],
    ],
)
def test_cli_usage_errors_exit_2(model_server, args):
    proc = agent(*args, env=agent_env(model_server))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip()
    assert model_server.requests == []


def test_cli_options_reach_the_request(model_server, workspace):
    model_server.enqueue(text_reply("ok"))
    proc = agent(
        "--model", "claude-sonnet-4-5", "--max-tokens", "1234", "--max-turns", "2",
        "--system", "You are terse.", "--tools", "read,grep", "--workspace", str(workspace.root),
        "hi", env=agent_env(model_server),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = model_server.bodies[0]
    assert body["model"] == "claude-sonnet-4-5" and body["max_tokens"] == 1234
    assert body["system"].startswith("You are terse.")
    assert [t["name"] for t in body["tools"]] == ["read", "grep"]


def test_cli_workspace_defaults_to_the_current_directory(model_server, workspace):
    (workspace.root / "here.txt").write_text("in cwd")
    model_server.enqueue(tool_reply(("read", {"path": "here.txt"})), text_reply("done"))
    proc = agent("--events", "read it", env=agent_env(model_server), cwd=workspace.root)
    result = next(json.loads(x) for x in proc.stdout.splitlines() if '"tool_result"' in x)
    assert json.loads(result["result"]) == {"content": "in cwd"}


def test_cli_ctrl_c_cancels_and_keeps_what_was_printed(model_server, workspace):
    model_server.enqueue(text_reply("tick " * 400, delay=0.01))
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "agent", "--workspace", str(workspace.root),
         "count"], env=agent_env(model_server), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    first = os.read(proc.stdout.fileno(), 5).decode()  # unbuffered: communicate() goes on
    assert first.startswith("tick")
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = (data.decode() for data in proc.communicate(timeout=20))
    assert proc.returncode == 1
    assert "Cancelled" in err and "Traceback" not in err
    printed = first + out
    assert printed.startswith("tick tick") and printed.count("tick") < 400


def test_cli_without_api_key_uses_the_offline_demo(workspace):
    (workspace.root / "a.txt").write_text("hello")
    proc = agent("list files", "--workspace", str(workspace.root), env=agent_env())
    assert proc.returncode == 0, proc.stderr
    assert "Offline demo model" in proc.stdout and "a.txt" in proc.stdout


def test_bad_environment_value_stops_start_up_naming_the_variable(model_server):
    proc = agent("hi", env=agent_env(model_server, HARNESS_MAX_TURNS="lots"))
    assert proc.returncode != 0 and "HARNESS_MAX_TURNS" in proc.stderr
    proc = agent("hi", env=agent_env(model_server, HARNESS_BASH="yolo"))
    assert proc.returncode != 0 and "HARNESS_BASH" in proc.stderr
    proc = agent("hi", env=agent_env(model_server, HARNESS_APPROVAL="sometimes"))
    assert proc.returncode != 0 and "HARNESS_APPROVAL" in proc.stderr


def clean_env(**extra) -> dict[str, str]:
    """What a fresh shell has: no DJANGO_DEBUG, no secret key, no Harness variables."""
    return {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1", **extra}


def test_cli_runs_in_a_clean_environment_without_debug_or_a_secret_key(workspace):
    (workspace.root / "notes.txt").write_text("hello")
    proc = agent("list the files", env=clean_env(), cwd=workspace.root)
    assert proc.returncode == 0, proc.stderr
    assert "Offline demo model" in proc.stdout and "notes.txt" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_cli_bad_setting_in_a_clean_environment_is_one_line(workspace):
    proc = agent("hi", env=clean_env(HARNESS_MAX_TURNS="lots"), cwd=workspace.root)
    assert proc.returncode == 2 and proc.stdout == ""
    message = "error: HARNESS_MAX_TURNS must be a whole number, not 'lots'"
    assert proc.stderr.splitlines() == [message]


def test_only_print_mode_goes_without_a_secret_key(workspace):
    """The server's commands still refuse to start without one (DJANGO_DEBUG not 1)."""
    for command in (["check"], ["migrate", "--plan"], ["help", "agent"]):
        proc = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), *command],
            env=clean_env(), cwd=workspace.root, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode != 0 and "is required" in proc.stderr
        assert "DJANGO_SECRET_KEY" in proc.stderr, command


def test_cli_approve_asks_on_the_terminal_for_each_call_that_changes_things(
    model_server, workspace
):
    (workspace.root / "f.txt").write_text("old")
    model_server.enqueue(
        tool_reply(("read", {"path": "f.txt"}), ("write", {"path": "new.txt", "content": "hi"})),
        tool_reply(("edit", {"path": "f.txt", "old_str": "old", "new_str": "new"})),
        text_reply("ok"),
    )  # fmt: skip
    proc = agent("--approve", "--events", "--workspace", str(workspace.root), "change things",
                 env=agent_env(model_server), input="y\nkeep it old\n")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("[y/n/reason]") == 2  # asked for the write and the edit, not read
    assert "Allow write: new.txt" in proc.stderr and "Allow edit: f.txt" in proc.stderr
    assert (workspace.root / "new.txt").read_text() == "hi"
    assert (workspace.root / "f.txt").read_text() == "old"
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    decisions = [(e["decision"], e.get("reason"), e["by"]) for e in events
                 if e["type"] == "approval_decision"]  # fmt: skip
    assert decisions == [("approve", None, "terminal"), ("deny", "keep it old", "terminal")]
    sent = model_server.bodies[-1]["messages"][-1]["content"][0]
    assert sent["is_error"] is True and "keep it old" in sent["content"]


def test_harness_approval_read_only_reaches_the_cli(model_server, workspace):
    model_server.enqueue(tool_reply(("write", {"path": "w.txt", "content": "x"})), text_reply("ok"))
    proc = agent("--workspace", str(workspace.root), "write", input="n\n",
                 env=agent_env(model_server, HARNESS_APPROVAL="read_only"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {t["name"] for t in model_server.bodies[0]["tools"]} == {"read", "grep", "list_dir"}


def test_cli_without_approve_asks_nothing(model_server, workspace):
    model_server.enqueue(tool_reply(("write", {"path": "w.txt", "content": "x"})), text_reply("ok"))
    proc = agent("--workspace", str(workspace.root), "write", env=agent_env(model_server))
    assert proc.returncode == 0, proc.stderr
    assert "[y/n/reason]" not in proc.stderr and (workspace.root / "w.txt").exists()


def test_create_api_token_runs_as_the_readme_gives_it_without_django_debug(tmp_path):
    """The first-use review: `python manage.py create_api_token USER` crashed with a
    traceback unless DJANGO_DEBUG=1 (it needs no secret key: tokens are stored hashed)."""
    from testkit.live import migrated_sqlite_template

    database = tmp_path / "db.sqlite3"
    database.write_bytes(migrated_sqlite_template().read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HARNESS_"))}
    env["DATABASE_URL"] = f"sqlite:///{database}"

    def manage(*args, **extra):
        return subprocess.run([sys.executable, str(REPO / "manage.py"), *args], cwd=tmp_path,
                              env={**env, **extra}, capture_output=True, text=True,
                              timeout=60)  # fmt: skip

    made = manage(
        "shell",
        "-c",
        "from agent.models import User; User.objects.create_user('ada', password='pw-ada-12345')",
        DJANGO_DEBUG="1",
    )
    assert made.returncode == 0, made.stderr
    token = manage("create_api_token", "ada")
    assert token.returncode == 0 and token.stderr == "", token.stderr
    assert len(token.stdout.strip()) >= 32
    unknown = manage("create_api_token", "nobody")
    assert unknown.returncode == 2 and "no user named 'nobody'" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    # A server's own requirements still hold for every other command.
    served = manage("check")
    assert served.returncode != 0 and "DJANGO_SECRET_KEY" in served.stderr
