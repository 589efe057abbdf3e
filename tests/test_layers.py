"""The layering of ``agent/`` (docs/ARCHITECTURE.md), checked on every module, not a list.

``agent.core`` is a library: the loop, its events, the model client and the tools. It
imports nothing of Django, Channels or the rest of the project, so the CLI, a test or
another program can drive it alone. Above it, each layer may use only the layers below:
``web`` → ``runs`` → ``ui`` → ``core``, with ``server`` (deployment plumbing) under all
three. Every import statement counts, also one inside a function (the project imports some
modules lazily), so a late import cannot sneak past.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

AGENT = REPO / "agent"
FRAMEWORKS = ("django", "channels", "asgiref", "daphne", "channels_redis")
PROJECT = ("agent", "harness_site", "tests", "testkit", "bench", "scripts")
# What each layer may import of the project (its own modules always). `agent.models` is
# the Django app's models module, the database schema every Django layer stores through.
ALLOWED = {
    "core": (),
    "server": ("agent.core",),
    # the broker, the per-user hosts and the server's client of them
    "sandbox": ("agent.core", "agent.server"),
    "ui": ("agent.core", "agent.server"),
    "runs": (
        "agent.core",
        "agent.server",
        "agent.sandbox",
        "agent.ui",
        "agent.models",
        "agent.access",
        "agent.egress",
    ),
    # the egress proxy: rules, ledger and log through the models; the runs start it (and
    # give it the credential lookup)
    "egress": ("agent.core", "agent.server", "agent.models"),
}


def modules(layer: str) -> list[Path]:
    found = sorted((AGENT / layer).rglob("*.py"))
    assert found, f"agent/{layer} has no modules"
    return found


def imported_names(path: Path, package: str = "") -> list[tuple[int, str]]:
    """Every module an import statement of ``path`` names, absolute, with its line;
    ``package``: the module's package (by default, from its place in the repository)."""
    tree = ast.parse(path.read_text(), str(path))
    package = package or ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.append((node.lineno, base))
            # `from agent.core import events`: the names may be modules themselves
            names += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return names


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(layer: str) -> list[str]:
    own = f"agent.{layer}"
    allowed = (own, *ALLOWED[layer])
    found = []
    for path in modules(layer):
        for line, name in imported_names(path):
            framework = layer == "core" and any(_under(name, f) for f in FRAMEWORKS)
            project = any(_under(name, p) for p in PROJECT)
            if framework or (project and not any(_under(name, a) for a in allowed)):
                found.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    return sorted(set(found))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer):
    assert violations(layer) == []


def test_the_check_sees_an_import_hidden_in_a_function(tmp_path):
    module = tmp_path / "sneaky.py"
    module.write_text("def f():\n    from django.conf import settings\n    from .. import web\n")
    names = [name for _, name in imported_names(module, "agent.core")]
    assert "django.conf" in names and "agent.web" in names


def test_the_core_runs_with_no_django_loaded():
    """Importing every core module (found by walking the package) loads no framework."""
    names = [
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in modules("core")
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "print(bad)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
