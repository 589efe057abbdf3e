"""The provider registry: which CLI agents exist, how each is found, started and spoken to.

A provider names a CLI (``claude-code``, ``pi``…), how to find it (``PATH`` or
``HARNESS_AGENT_<NAME>_COMMAND``), the major versions whose structured output we parse (an
unknown major version is refused with a clear message: its output may have changed), its
command line and environment, what to type into the pane for a prompt and for an interrupt,
and a parser of its structured output (one per run: parsers keep a little state).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Protocol

from agent.core.cli_agents.prompt_loop import ABORT_LINE, loop_argv, prompt_line
from agent.core.events import Event


class UnknownVersion(Exception):
    """The CLI's major version is not one whose output this release understands."""


class Parser(Protocol):
    def feed(self, line: str) -> list[Event]: ...

    @property
    def finished(self) -> bool: ...  # the prompt's turn is over (success or error)

    @property
    def failed(self) -> str | None: ...  # why the turn failed, when it did


class Provider:
    name: str = ""
    binary: str = ""  # the executable looked up on PATH
    majors: tuple[int, ...] = ()  # major versions whose output we parse
    # the pane's patterns, for the state where the structured channel says nothing
    idle_pattern = re.compile(r"^[>❯]\s*$", re.MULTILINE)
    waiting_pattern = re.compile(r"Do you want to|\(y/n\)|Allow|Approve", re.IGNORECASE)

    def command_env_name(self) -> str:
        return "HARNESS_AGENT_" + self.name.upper().replace("-", "_") + "_COMMAND"

    def find(self, environ: dict[str, str] | None = None) -> str | None:
        """The CLI's executable: ``HARNESS_AGENT_<NAME>_COMMAND`` when set, else on PATH."""
        environ = os.environ if environ is None else environ
        configured = environ.get(self.command_env_name(), "").strip()
        if configured:
            return configured if os.access(configured, os.X_OK) else None
        return shutil.which(self.binary, path=environ.get("PATH"))

    def parse_version(self, output: str) -> str:
        match = re.search(r"(\d+)\.(\d+)\.(\d+)", output)
        if match is None:
            raise UnknownVersion(f"{self.name}: could not read a version from {output[:80]!r}")
        version = match.group(0)
        if int(match.group(1)) not in self.majors:
            known = ", ".join(f"{m}.x" for m in self.majors)
            raise UnknownVersion(
                f"{self.name} {version} is not supported (this release understands {known}); "
                "install a supported version"
            )
        return version

    # -- what runs in the pane ---------------------------------------------------------------
    def argv(self, executable: str, *, conversation_id: str, resume: str | None,
             approval: str = "auto", model: str | None = None) -> list[str]:  # fmt: skip
        """The command line. ``model``: the conversation's (else the CLI's default);
        ``resume``: the CLI's own session to continue (after the tmux session ended: idle, a
        restart, a cancel that had to kill it); ``approval``: the conversation's tool
        approval, where the CLI can ask."""
        raise NotImplementedError

    def approval_response(self, request_id: str, allow: bool, call_input: dict,
                          reason: str | None) -> str | None:  # fmt: skip
        """The line answering the CLI's permission request, if it asks through its channel."""
        return None

    def env(self) -> dict[str, str]:
        return {}

    def config_files(self, base_url: str) -> dict[str, str]:
        """Files (relative to the CLI's HOME) that point it at the model endpoint."""
        return {}

    def prompt_input(self, content: str) -> str:
        """What to paste into the pane for a prompt (one line: multi-line safe)."""
        raise NotImplementedError

    def interrupt_input(self) -> str | None:
        """A line that interrupts the turn through the structured channel, if any."""
        return None

    interrupt_keys: tuple[str, ...] = ("C-c",)  # else these keys (tmux send-keys)

    def session_marker(self, parser: Parser) -> str | None:
        """What to keep to resume the CLI's session in a new process (see ``argv``)."""
        return None

    def parser(self) -> Parser:
        raise NotImplementedError

    def pane_state(self, pane: str) -> str:
        """The status read from the pane's text: idle, waiting_input or processing."""
        tail = "\n".join(pane.rstrip().splitlines()[-15:])
        if self.waiting_pattern.search(tail):
            return "waiting_input"
        if self.idle_pattern.search(tail):
            return "idle"
        return "processing"


class ClaudeCode(Provider):
    """Claude Code in print mode with stream-json in and out: the session stays open (one
    process, many prompts), every message is one JSON line on its stdout."""

    name = "claude-code"
    binary = "claude"
    majors = (1, 2)
    interrupt_keys = ("C-c",)

    def argv(self, executable: str, *, conversation_id: str, resume: str | None,
             approval: str = "auto", model: str | None = None) -> list[str]:  # fmt: skip
        argv = [executable, "-p", "--input-format", "stream-json", "--output-format",
                "stream-json", "--verbose"]  # fmt: skip
        if model:
            argv += ["--model", model]
        if approval == "auto":
            argv.append("--dangerously-skip-permissions")  # the sandbox is the boundary
        else:
            # Its permission requests come as control requests on stdout (an approval card
            # on the page) and are answered on stdin.
            argv += ["--permission-prompt-tool", "stdio"]
        if resume:
            argv += ["--resume", resume]  # its session id, from the init line
        return argv

    def env(self) -> dict[str, str]:
        return {
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "IS_SANDBOX": "1",  # it is in one; lets it skip its own permission prompts
        }

    def prompt_input(self, content: str) -> str:
        message = {"type": "user", "message": {"role": "user", "content": content}}
        return json.dumps(message, ensure_ascii=True) + "\n"

    def interrupt_input(self) -> str | None:
        # The SDK's control request: the turn stops, the process (and session) stays.
        request = {"type": "control_request", "request_id": "harness-interrupt",
                   "request": {"subtype": "interrupt"}}  # fmt: skip
        return json.dumps(request) + "\n"

    def session_marker(self, parser: Parser) -> str | None:
        return getattr(parser, "session_id", None)

    def approval_response(self, request_id: str, allow: bool, call_input: dict,
                          reason: str | None) -> str | None:  # fmt: skip
        denied = reason or "The user denied this call."
        answer = ({"behavior": "allow", "updatedInput": call_input} if allow else
                  {"behavior": "deny", "message": denied})  # fmt: skip
        response = {"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": answer}}  # fmt: skip
        return json.dumps(response, ensure_ascii=True) + "\n"

    def parser(self) -> Parser:
        from agent.core.cli_agents.claude_code import ClaudeStreamParser

        return ClaudeStreamParser()


class Pi(Provider):
    """Pi (``@mariozechner/pi-coding-agent``) in RPC mode: JSON commands on stdin, JSON events
    on stdout."""

    name = "pi"
    binary = "pi"
    majors = (0,)

    def argv(self, executable: str, *, conversation_id: str, resume: str | None,
             approval: str = "auto", model: str | None = None) -> list[str]:  # fmt: skip
        # Pi has no permission prompts: ``approval`` does not apply. Sessions are kept per
        # conversation (in the CLI's HOME): --continue picks this one's.
        sessions = f"/home/agent/.pi/sessions/{conversation_id}"
        argv = [executable, "--mode", "rpc", "--provider", "anthropic", "--offline",
                "--session-dir", sessions]  # fmt: skip
        if model:
            argv += ["--model", f"anthropic/{model}"]
        if resume:
            argv.append("--continue")
        return argv

    def env(self) -> dict[str, str]:
        return {"PI_OFFLINE": "1"}

    def config_files(self, base_url: str) -> dict[str, str]:
        # Pi ignores ANTHROPIC_BASE_URL: its built-in provider is routed in models.json.
        return {
            ".pi/agent/models.json": json.dumps({"providers": {"anthropic": {"baseUrl": base_url}}})
        }

    def prompt_input(self, content: str) -> str:
        return prompt_line(content)

    def interrupt_input(self) -> str | None:
        return ABORT_LINE

    def session_marker(self, parser: Parser) -> str | None:
        return "1"  # its sessions are per conversation already: continue the latest

    def parser(self) -> Parser:
        from agent.core.cli_agents.pi import PiRpcParser

        return PiRpcParser()


class PerPrompt(Provider):
    """A CLI that answers one prompt per process, kept in the pane by the prompt loop
    (``prompt_loop.LOOP``): prompts and the abort are its JSON lines, and the session id it
    learned is what resumes the conversation in a new loop."""

    def prompt_input(self, content: str) -> str:
        return prompt_line(content)

    def interrupt_input(self) -> str | None:
        return ABORT_LINE

    def session_marker(self, parser: Parser) -> str | None:
        return getattr(parser, "session_id", None)


class OpenCode(PerPrompt):
    """OpenCode (``opencode run --format json``), one process per prompt, kept in the pane by
    the prompt loop (``prompt_loop.LOOP``) that continues the conversation's session. It has no
    permission channel in this mode: it runs its tools unasked (``--auto``), in the sandbox."""

    name = "opencode"
    binary = "opencode"
    majors = (1,)

    def argv(self, executable: str, *, conversation_id: str, resume: str | None,
             approval: str = "auto", model: str | None = None) -> list[str]:  # fmt: skip
        base = ["run", "--format", "json", "--auto"]
        if model:
            base += ["--model", f"anthropic/{model}"]
        return loop_argv(executable, base, [*base, "--session", "{session}"], "sessionID",
                         resume)  # fmt: skip

    def env(self) -> dict[str, str]:
        # Nothing of its own from the network: no update check, no model catalogue, no
        # plugins or language servers to download, no sharing.
        return {name: "1" for name in (
            "OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_MODELS_FETCH",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS", "OPENCODE_DISABLE_LSP_DOWNLOAD",
            "OPENCODE_DISABLE_SHARE", "OPENCODE_DISABLE_CLAUDE_CODE",
        )}  # fmt: skip

    def config_files(self, base_url: str) -> dict[str, str]:
        # Its Anthropic provider's base URL ends with the API version; the key comes from
        # ANTHROPIC_API_KEY (the gateway's credential).
        config = {"provider": {"anthropic": {"options": {"baseURL": base_url + "/v1"}}},
                  "autoupdate": False, "share": "disabled"}  # fmt: skip
        return {".config/opencode/opencode.json": json.dumps(config)}

    def parser(self) -> Parser:
        from agent.core.cli_agents.opencode import OpenCodeParser

        return OpenCodeParser()


class Codex(PerPrompt):
    """Codex, its model provider the gateway's Responses API (``/llm/openai/v1``, translated
    to the deployment's upstream). Its own sandbox (Landlock, seccomp, bubblewrap) is not
    used: ours confines it already (the workspace, its home, no network but the gateway).
    With approval ``auto``: ``codex exec --json``, one process per prompt, the next one
    ``codex exec resume <thread>``, its tools run unasked. Otherwise: its ``app-server``
    through a bridge (``codex_bridge``), whose approval requests become approval cards."""

    name = "codex"
    binary = "codex"
    majors = (0,)

    def argv(self, executable: str, *, conversation_id: str, resume: str | None,
             approval: str = "auto", model: str | None = None) -> list[str]:  # fmt: skip
        if approval != "auto":
            from agent.core.cli_agents.codex_bridge import bridge_argv

            return bridge_argv(executable, model, resume)
        options = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        if model:
            options += ["--model", model]
        return loop_argv(executable, ["exec", *options],
                         ["exec", "resume", *options, "{session}"], "thread_id",
                         resume)  # fmt: skip

    def approval_response(self, request_id: str, allow: bool, call_input: dict,
                          reason: str | None) -> str | None:  # fmt: skip
        from agent.core.cli_agents.codex_bridge import approval_line

        return approval_line(request_id, allow)

    def env(self) -> dict[str, str]:
        return {"NO_COLOR": "1", "CODEX_DISABLE_UPDATE_CHECK": "1"}

    def config_files(self, base_url: str) -> dict[str, str]:
        from agent.core.cli_agents.codex import HOME_CONFIG, config_toml

        # The gateway's Anthropic endpoint names its root: the Responses API is beside it.
        # The key Codex presents is the same placeholder as the other CLIs' (not a secret).
        root = base_url.removesuffix("/anthropic")
        return {HOME_CONFIG: config_toml(root + "/openai/v1", "ANTHROPIC_API_KEY")}

    def parser(self) -> Parser:
        from agent.core.cli_agents.codex import CodexParser

        return CodexParser()


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        ClaudeCode(),
        Pi(),
        Codex(),
        OpenCode(),
    )
}  # fmt: skip


def provider_for(name: str) -> Provider | None:
    return PROVIDERS.get(name)
