"""Small helpers for the tool tests."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOBODY = 65534


def run(tool, **params) -> tuple[dict, bool]:
    """Execute a tool synchronously; returns (parsed result JSON, is_error)."""
    result = asyncio.run(tool.execute(params))
    return json.loads(result.content), result.is_error


def run_unprivileged(tool_factory, root: Path, params: dict) -> tuple[dict, bool]:
    """Run a tool as an unprivileged user (so permission checks apply even when the tests
    run as root): in a forked child that drops to uid nobody when we are root."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            from agent.core.tools import Workspace

            result = asyncio.run(tool_factory(Workspace(root)).execute(params))
            os.write(write_end, json.dumps([result.content, result.is_error]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    content, is_error = json.loads(data)
    return json.loads(content), is_error


@contextmanager
def open_workspace() -> Iterator[Path]:
    """A workspace that an unprivileged user can traverse (pytest's tmp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="harness-ws-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
