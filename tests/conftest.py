"""Shared fixtures: the test model server, an SDK client on it, workspaces, ../shared."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent.core.config import Config
from agent.core.loop import AgentLoop
from agent.core.model.anthropic import AnthropicProvider
from agent.core.tools import Workspace, build_tools
from testkit.model_server import ModelServer, echo_fallback
from tests import durations

REPO = Path(__file__).resolve().parent.parent
# This process imports the ASGI application (in-process socket tests) but serves nothing:
# it keeps root for its own fixtures. The servers it starts (testkit.live) drop it.
os.environ["HARNESS_IN_PROCESS"] = "1"
# The live servers it starts hash passwords fast (testkit/live_settings.py says why).
os.environ["HARNESS_LIVE_SETTINGS"] = "testkit.live_settings"
SHARED = REPO.parent / "shared"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """In xdist's workers (``make test``), the longest test files first (tests/durations.py
    says why; each browser file closes its browser when it ends), after the browser tests'
    own order (tests/e2e/conftest.py), which a run in one process keeps."""
    if hasattr(config, "workerinput"):
        durations.longest_first(items, durations.load())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's outcome on the test item (``item.failed_phases``): a fixture's teardown
    can then say more about a failure (the CLI agents' panes, tests/cli_agents.py)."""
    report = yield
    if report.failed:
        item.failed_phases = {*getattr(item, "failed_phases", set()), report.when}
    return report


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skips (or fails with HARNESS_REQUIRE_SHARED=1) if absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"{path} is absent (../shared is not beside this checkout)"
        if os.environ.get("HARNESS_REQUIRE_SHARED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def require_service(name: str, reason: str) -> None:
    if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{name} is required (HARNESS_REQUIRE_SERVICES=1): {reason}")
    pytest.skip(f"{name} unavailable: {reason}")


def require_bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        if os.environ.get("HARNESS_REQUIRE_SERVICES") == "1":
            pytest.fail("bubblewrap is required on CI (.ci/run installs it)")
        pytest.skip("bubblewrap (bwrap) is not installed")
    return path


@pytest.fixture(scope="module")
def model():
    """One test model server for a module's live server (module-scoped, like it)."""
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def fresh(model):
    """The module's model server with nothing queued, echoing prompts when nothing is."""
    model.reset()
    model.fallback = echo_fallback
    return model


@pytest.fixture
def model_server():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
async def sdk_client(model_server):
    # The product's own client (the SDK on its aiohttp transport), so every failure case
    # runs through what production runs. Short retry waits: the tests set retry-after-ms.
    from agent.core.config import Config
    from agent.core.model.client import make_client

    client = make_client(Config(api_key="test-key", base_url=model_server.url))
    yield client
    await client.close()


@pytest.fixture
def workspace(tmp_path) -> Workspace:
    root = tmp_path / "workspace"
    root.mkdir()
    return Workspace(root)


@pytest.fixture
def make_harness(sdk_client, workspace):
    """Build a Harness on the test server; returns (harness, events list)."""

    def build(tools=None, events=None, **config):
        events = [] if events is None else events
        config.setdefault("api_key", "test-key")
        tools = build_tools(workspace, "sandbox") if tools is None else tools
        harness = AgentLoop(AnthropicProvider(sdk_client), tools, Config(**config), events.append)
        return harness, events

    return build


def types(events, *, deltas: bool = False) -> list[str]:
    return [e.type for e in events if deltas or e.type != "text_delta"]
