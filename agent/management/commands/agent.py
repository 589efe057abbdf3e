"""``python manage.py agent``: print mode (one prompt, the answer streamed to standard output),
the same core as the web app."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from agent.core.config import ConfigError
from agent.core.events import (
    ErrorEvent,
    Event,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from agent.core.instructions import DirectoryInstructions
from agent.core.loop import AgentLoop, Decision
from agent.core.model.client import make_provider
from agent.core.system_prompt import build_system_prompt
from agent.core.tools import TOOL_NAMES, UnknownToolError, Workspace, build_tools
from agent.runs.config import agent_config
from agent.runs.sandbox import sandbox_limits


class Command(BaseCommand):
    help = "Run one prompt through the agent in a workspace and print the answer as it streams."
    requires_system_checks: list = []  # a quick tool: no model checks, no database needed

    def add_arguments(self, parser):
        parser.add_argument(
            "prompt",
            nargs="*",
            metavar="PROMPT",
            help="the prompt; without it, standard input (when piped)",
        )
        parser.add_argument("--model", help="model id (default: HARNESS_MODEL)")
        parser.add_argument("--max-turns", type=int, help="API calls per prompt")
        parser.add_argument("--max-tokens", type=int, help="tokens per response")
        parser.add_argument("--system", help="replaces the built-in identity text")
        parser.add_argument("--workspace", help="directory the tools work in (default: .)")
        parser.add_argument(
            "--tools",
            help=f"comma list of tools (default: all of {','.join(TOOL_NAMES)} that are enabled)",
        )
        parser.add_argument("--events", action="store_true",
                            help="print every event as one JSON object per line")  # fmt: skip
        parser.add_argument(
            "--approve",
            action="store_true",
            help="ask on the terminal before write, edit and bash run (y, n, or a reason to "
            "deny with); answers are read from standard input when PROMPT is given",
        )

    def handle(self, *args, **opts):
        prompt = " ".join(opts["prompt"]).strip()
        answers = sys.stdin if prompt else None  # (else stdin is the prompt: the terminal)
        if not prompt and not sys.stdin.isatty():
            prompt = sys.stdin.read().strip()  # piped stdin is one prompt, not one per line
        if not prompt:
            raise CommandError("no prompt: give PROMPT or pipe one on standard input", returncode=2)
        overrides = {k: v for k, v in {
            "model": opts["model"], "max_turns": opts["max_turns"],
            "max_tokens": opts["max_tokens"], "system_prompt": opts["system"],
        }.items() if v is not None}  # fmt: skip
        try:
            config = agent_config(**overrides)
            if opts["approve"]:
                config = config.replace(approval="ask")
            workspace = Workspace(opts["workspace"] or os.getcwd())
            names = [n.strip() for n in opts["tools"].split(",")] if opts["tools"] else None
            tools = build_tools(
                workspace, settings.HARNESS_BASH, names, sandbox_limits=sandbox_limits()
            )
        except (ConfigError, UnknownToolError, ValueError) as exc:
            raise CommandError(str(exc), returncode=2) from exc
        system = build_system_prompt(workspace, config.system_prompt)
        # The printer writes partial lines as the text streams: no ending added per write.
        self.stdout.ending = ""
        printer = EventPrinter(self.stdout, sys.stderr, opts["events"])
        approver = TerminalApprover(answers, sys.stderr) if opts["approve"] else None
        harness = AgentLoop(make_provider(config), tools, config, printer, system=system,
                            instructions=DirectoryInstructions(workspace),
                            approver=approver)  # fmt: skip
        printer.on_closed = harness.cancel  # stdout went away (`| head`): stop the run
        result = asyncio.run(_run(harness, prompt))
        if printer.closed:
            sys.exit(1)
        self.stdout.flush()
        if result.state == "error":
            sys.stderr.write(f"error: {result.message}\n")
            sys.exit(1)


async def _run(harness: AgentLoop, prompt: str):
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_interrupt() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:  # a second Ctrl-C means: stop waiting
            os._exit(130)
        harness.cancel()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        return await harness.prompt(prompt)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        await harness.provider.close()  # the SDK's HTTP session, on this loop


class TerminalApprover:
    """``--approve``: each write, edit or bash call is shown on stderr and waits for a line:
    ``y`` approves, ``n`` (or nothing) denies, any other text denies with it as the reason
    given to the model. Lines come from ``answers`` (standard input when the prompt was an
    argument), else from the controlling terminal; with neither, the call is denied."""

    def __init__(self, answers, err):
        self.answers, self.err = answers, err

    async def __call__(self, call: dict) -> Decision:
        params = call["input"] if isinstance(call["input"], dict) else {}
        shown = {"bash": params.get("command"), "write": params.get("path")}.get(call["name"])
        if call["name"] == "edit":
            shown = f"{params.get('path')}: {params.get('old_str')!r} → {params.get('new_str')!r}"
        if call["name"] == "write":
            shown = f"{shown} ({len(str(params.get('content', '')))} characters)"
        self.err.write(f"Allow {call['name']}: {shown}? [y/n/reason] ")
        self.err.flush()
        line = await self._read_line()
        if line is None:
            self.err.write("\n")
            return Decision("deny", "no answer on the terminal", "terminal")
        answer = line.strip()
        if answer.lower() in ("y", "yes"):
            return Decision("approve", None, "terminal")
        if answer.lower() in ("", "n", "no"):
            return Decision("deny", None, "terminal")
        return Decision("deny", answer, "terminal")

    async def _read_line(self) -> str | None:
        """One line, read in a daemon thread (a cancelled run must not wait for it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str | None] = loop.create_future()

        def read() -> None:
            try:
                source = self.answers
                if source is None:
                    source = open("/dev/tty")  # noqa: SIM115 - closed with the process
                line = source.readline()
            except OSError:
                line = ""
            result = line if line else None
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(result))

        threading.Thread(target=read, daemon=True).start()
        return await future


class EventPrinter:
    """Plain mode: the assistant's text on stdout as it streams, tool activity on stderr.
    Events mode: every event as a JSON line on stdout."""

    def __init__(self, out, err, events: bool):
        self.out, self.err, self.events = out, err, events
        self.at_line_start = True
        self.in_block = False
        self.blocks = 0
        self.closed = False
        self.on_closed = lambda: None

    def __call__(self, event: Event) -> None:
        if self.closed:
            return
        try:
            self._print(event)
        except BrokenPipeError:
            self.closed = True
            # Later writes (and the interpreter's final flush) must not fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())
            self.on_closed()

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def _print(self, event: Event) -> None:
        if self.events:
            self._write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
            return
        if isinstance(event, TextDeltaEvent):
            if not self.in_block and self.blocks:
                self._write("\n")  # a blank line between text blocks
            self.in_block = True
            self._write(event.content)
            self.at_line_start = event.content.endswith("\n")
        elif isinstance(event, TextEvent):
            if not self.in_block:  # a block that arrived whole (no deltas)
                self._write(("\n" if self.blocks else "") + event.content)
                self.at_line_start = event.content.endswith("\n")
            if not self.at_line_start:
                self._write("\n")
                self.at_line_start = True
            self.in_block = False
            self.blocks += 1
        elif isinstance(event, ToolCallEvent):
            self.err.write(f"→ {event.name} {json.dumps(event.input, ensure_ascii=False)}\n")
        elif isinstance(event, ToolResultEvent) and event.isError:
            self.err.write(f"✗ {event.result[:500]}\n")
        elif isinstance(event, ErrorEvent) and event.code in ("max_turns", "max_tokens", "refusal"):
            self.err.write(f"warning: {event.message}\n")
