"""Workspace confinement against the public path-traversal corpora (../shared/conformance/
traversal): every file tool and the bash sandbox. Nothing outside the workspace is read,
listed, searched, written or changed, whatever the payload or its URL-decoded forms."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from urllib.parse import unquote

import pytest

from agent.core.tools import Workspace
from agent.core.tools.bash import BashTool
from agent.core.tools.files import EditTool, ReadTool, WriteTool
from agent.core.tools.search import GrepTool, ListDirTool
from tests.conftest import require_bwrap, shared_path

CANARY = "CANARY-OUTSIDE-THE-WORKSPACE"
TARGETS = ("canary.txt", "etc/passwd", "etc/shadow", "proc/self/environ")
DEPTH = 8


def payloads() -> list[str]:
    folder = shared_path("conformance", "traversal")
    raw = set()
    for file in sorted(folder.glob("*.txt")):
        for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                raw.add(line.strip())
    paths = set()
    for payload in raw:
        for target in TARGETS:
            path = payload.replace("{FILE}", target)
            paths.add(path)
            decoded = path
            for _ in range(3):  # the model might send the decoded forms too
                decoded = unquote(decoded)
                paths.add(decoded)
    return sorted(p for p in paths if "\x00" not in p) + ["a\x00b", "../canary.txt\x00.txt"]


@pytest.fixture(scope="module")
def corpus():
    return payloads()


@pytest.fixture
def jail(tmp_path):
    """A workspace DEPTH levels down, with a canary file at every level above it."""
    level = tmp_path
    (level / "canary.txt").write_text(CANARY)
    for i in range(DEPTH - 1):
        level = level / f"w{i}"
        level.mkdir()
        (level / "canary.txt").write_text(CANARY)
    root = level / "workspace"
    root.mkdir()
    (root / "inside.txt").write_text("inside\n")
    return tmp_path, Workspace(root)


def snapshot(top: Path, workspace: Path) -> dict[str, str]:
    """Every file outside the workspace under ``top`` with a hash of its content."""
    files = {}
    for path in top.rglob("*"):
        if path.is_file() and not path.is_relative_to(workspace):
            files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def leaked(text: str) -> bool:
    return CANARY in text or "root:x:0:0" in text or "root:" in text and ":0:0:" in text


async def _run_all(tool, corpus, make_params):
    leaks = []
    for path in corpus:
        result = await tool.execute(make_params(path))
        if leaked(result.content):
            leaks.append(path)
    return leaks


@pytest.mark.parametrize(
    ("tool_cls", "make_params"),
    [
        (ReadTool, lambda p: {"path": p}),
        (ListDirTool, lambda p: {"path": p}),
        (GrepTool, lambda p: {"pattern": "CANARY\\|root", "path": p, "recursive": True}),
        (EditTool, lambda p: {"path": p, "old_str": "CANARY", "new_str": "PWNED"}),
        (WriteTool, lambda p: {"path": p, "content": "PWNED"}),
    ],
    ids=["read", "list_dir", "grep", "edit", "write"],
)
def test_traversal_corpus_never_leaves_the_workspace(jail, corpus, tool_cls, make_params):
    top, workspace = jail
    before = snapshot(top, workspace.root)
    leaks = asyncio.run(_run_all(tool_cls(workspace), corpus, make_params))
    assert leaks == []
    assert snapshot(top, workspace.root) == before, "a file outside the workspace changed"
    assert len(corpus) > 1000


def test_traversal_corpus_inside_the_bash_sandbox(jail, corpus):
    require_bwrap()
    top, workspace = jail
    (workspace.root / "payloads.json").write_text(json.dumps(corpus))
    script = (
        "import json\n"
        "for p in json.load(open('payloads.json')):\n"
        "    try:\n"
        "        print(open(p, errors='replace').read()[:200])\n"
        "    except Exception:\n"
        "        pass\n"
        "    try:\n"
        "        open(p, 'a').write('PWNED')\n"
        "    except Exception:\n"
        "        pass\n"
    )
    (workspace.root / "probe.py").write_text(script)
    before = snapshot(top, workspace.root)
    tool = BashTool(workspace, "sandbox", timeout=60)
    result = asyncio.run(tool.execute({"command": "python3 probe.py; echo done"}))
    output = json.loads(result.content)["output"]
    assert output.rstrip().endswith("done")
    assert CANARY not in output
    assert snapshot(top, workspace.root) == before
