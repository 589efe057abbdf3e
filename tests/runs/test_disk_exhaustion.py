"""A full disk must not take the service down (red-team finding: with workspaces and the
database on one file system, ``cat /dev/zero > fill`` made every user's requests fail with
"database or disk is full", left the run stuck in running, and /healthz still said ok).

- Workspaces get a kernel-enforced quota (a loop-mounted ext4 image each, agent/server/storage.py):
  a user who fills theirs gets a clear error; other users and the database go on.
- A run whose events cannot be stored (its database's disk is full) ends with an error and
  leaves ``running``.
- /healthz checks that the server can write and that its disks have room.

Tests that mount (a tmpfs as the small disk, loop images) need root and loop devices: they
skip with the reason otherwise, and fail under HARNESS_REQUIRE_SERVICES=1 (CI is root).
Every mount is undone, whatever the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import json
import os
import sqlite3
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from agent.server import storage
from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.conftest import require_bwrap, require_service

QUOTA_MB = 8


# -- a small disk ------------------------------------------------------------------------


def require_mounts() -> None:
    """Root, the mount tools and loop devices: what a size-limited disk in a test needs."""
    if os.geteuid() != 0:
        require_service("mount", "the tests mount a small tmpfs and loop images: needs root")
    reason = storage.loop_unsupported(Path(tempfile.gettempdir()))
    if reason is not None:
        require_service("loop devices", reason)


@contextlib.contextmanager
def small_disk(size_mb: int):
    """A tmpfs of ``size_mb`` MB; on exit, everything mounted inside it and then the tmpfs
    itself is unmounted (lazily when something still holds it), even after a failure."""
    root = Path(tempfile.mkdtemp(prefix="harness-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs",
                    str(root)], check=True)  # fmt: skip
    try:
        yield root
    finally:
        gc.collect()  # workspaces hold descriptors of their mounts
        storage.unmount_all(root)
        with contextlib.suppress(OSError):
            root.rmdir()


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the disk is full; the bytes written."""
    written = 0
    chunk = b"\0" * (256 * 1024)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written


def events_of(items) -> list[dict]:
    return [item[2] for item in items if item[0] == "event"]


def is_final(item) -> bool:
    return (
        item[0] == "event" and item[2]["type"] == "status" and item[2]["state"] in ("idle", "error")
    )


def healthz(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def run_prompt(api: Api, content: str, conversation: str | None = None) -> tuple[str, list]:
    """Start a prompt through the API and return its conversation and events, to the end."""
    if conversation is None:
        conversation = api.call("POST", "/api/conversations", {})[1]["id"]
    _, stream = api.events(conversation)
    status, body = api.call("POST", f"/api/conversations/{conversation}/prompt",
                            {"content": content})  # fmt: skip
    assert status == 202, body
    return conversation, events_of(read_until(stream, is_final, timeout=60))


# -- workspaces on the database's disk ---------------------------------------------------


def test_a_full_workspace_stops_at_its_quota_and_nobody_else_notices(model):
    """The finding's setup: the database and the workspaces on one (64 MB) disk. Alice's
    agent runs ``cat /dev/zero > fill``: her workspace is full at its quota, the command
    fails saying so; Bob's agent then writes in his; the database took every event."""
    require_mounts()
    require_bwrap()
    with small_disk(64) as disk:
        server = LiveServer(
            disk,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=model.url,
            HARNESS_SSE_HEARTBEAT="1",  # the stream's headers go out with its first comment
            HARNESS_BASH="sandbox",
            HARNESS_WORKSPACE_STORAGE="loop",
            HARNESS_WORKSPACE_QUOTA_MB=str(QUOTA_MB),
            HARNESS_MIN_FREE_MB="8",
            HARNESS_RUNS_PER_MINUTE="100",
        )
        try:
            server.start()
            server.create_users("alice", "bob")
            alice = Api(server.url, server.manage("create_api_token", "alice").strip())
            bob = Api(server.url, server.manage("create_api_token", "bob").strip())

            model.enqueue(tool_reply(("bash", {"command": "cat /dev/zero > fill"})),
                          text_reply("Your workspace is full."))  # fmt: skip
            filled, events = run_prompt(alice, "fill the disk")
            alice_events = [e for e in events if e["type"] != "text_delta"]
            result = next(e for e in events if e["type"] == "tool_result")
            assert result["isError"], result
            assert f"the workspace is full: its quota is {QUOTA_MB} MB" in result["result"]
            assert "No space left on device" in result["result"]
            assert events[-1] == {**events[-1], "state": "idle"}  # the run itself went on

            model.enqueue(tool_reply(("bash", {"command": "echo hello > note && cat note"})),
                          text_reply("Done."))  # fmt: skip
            _, events = run_prompt(bob, "write a note")
            result = next(e for e in events if e["type"] == "tool_result")
            assert not result["isError"] and "hello" in result["result"], result
            assert events[-1]["state"] == "idle"

            # Alice's run was stored whole (a fresh stream replays it from the database).
            _, stream = alice.events(filled)
            replay = events_of(read_until(stream, is_final))
            assert replay == alice_events  # (the partial text rows give way to the text)
            # Each workspace is its own file system, limited to the quota.
            paths = [p for p in (disk / "workspaces").iterdir() if p.name.isdigit()]
            assert len(paths) == 2
            for path in paths:
                assert os.path.ismount(path)
                assert os.statvfs(path).f_blocks * os.statvfs(path).f_frsize <= QUOTA_MB << 20
            status, health = healthz(server.url)
            assert status == 200 and health["status"] == "ok", health
        finally:
            server.stop()
            print(server.log.read_text()[-4000:])  # shown when the test fails


# -- the database's disk full ----------------------------------------------------------


def test_a_run_whose_database_disk_fills_ends_with_an_error_and_is_not_left_running(
    model, tmp_path
):
    """The database on a small disk that fills while a prompt streams: the run ends at
    once with a clear error on the page, /healthz answers 503 naming the disk, and once
    space is back the conversation has left ``running`` (here the final save could not
    be written either: the lapsed lease is reaped)."""
    require_mounts()
    with small_disk(24) as disk:
        database = disk / "db.sqlite3"
        server = LiveServer(
            tmp_path,
            DATABASE_URL=f"sqlite:///{database}",
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=model.url,
            HARNESS_SSE_HEARTBEAT="1",  # the stream's headers go out with its first comment
            HARNESS_BASH="off",
            HARNESS_RUN_LEASE="3",
            HARNESS_MIN_FREE_MB="4",
        )
        try:
            server.start()
            server.create_users("carol")
            carol = Api(server.url, server.manage("create_api_token", "carol").strip())
            conversation = carol.call("POST", "/api/conversations", {})[1]["id"]
            _, stream = carol.events(conversation)
            model.enqueue(text_reply("slowly " * 3000, delay=0.01))  # about 25 s of text
            assert carol.call("POST", f"/api/conversations/{conversation}/prompt",
                              {"content": "write a lot"})[0] == 202  # fmt: skip
            read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "text_delta")
            filler = disk / "filler"
            fill(filler)
            started = time.monotonic()
            events = events_of(read_until(stream, is_final, timeout=20))
            assert time.monotonic() - started < 10  # not the 25 s the answer would take
            error = next(e for e in events if e["type"] == "error")
            assert error["code"] == "storage_full", error
            assert "disk is full" in error["message"]
            assert events[-1]["state"] == "error"

            status, health = healthz(server.url)
            assert status == 503 and health["status"] == "error", health
            assert health["database_disk"].startswith("error: disk full"), health
            assert health["database"] == "ok"  # reading still works: the disk is the cause

            # Full until the run's retried final save has given up (FINISH_RETRIES: 7 s).
            time.sleep(8)
            assert _state(database, conversation) == "running"
            filler.unlink()
            deadline = time.monotonic() + 15  # lease 3 s, reaper every second
            while _state(database, conversation) == "running" and time.monotonic() < deadline:
                time.sleep(0.25)
            assert _state(database, conversation) == "interrupted"
            status, health = healthz(server.url)
            assert status == 200, health
        finally:
            server.stop()
            print(server.log.read_text()[-4000:])  # shown when the test fails


def _state(database: Path, conversation: str) -> str:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT state FROM agent_conversation WHERE id = ?",
                         (conversation.replace("-", ""),)).fetchone()  # fmt: skip
    return row[0]


# -- in process: the run, healthz, the storage module ----------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_run_that_cannot_store_its_events_ends_in_error_at_once(
    settings, model_server, tmp_path, monkeypatch
):
    """No root needed: the event log answers "database or disk is full" (as SQLite does);
    the run is stopped with the storage error and its conversation leaves running."""
    from django.db.utils import OperationalError

    from agent.models import Conversation, Event, User
    from agent.runs import eventlog
    from agent.runs.manager import runs

    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = "k", model_server.url
    settings.HARNESS_WORKSPACES, settings.HARNESS_BASH = tmp_path, "off"
    user = await sync_to_async(User.objects.create_user)("dora", password="pw-dora-123")
    conversation = await sync_to_async(Conversation.objects.create)(owner=user, model="m")
    model_server.enqueue(text_reply("slow " * 2000, delay=0.01))
    stored = eventlog.store
    full = asyncio.Event()

    async def store(conversation_id, events, history=None, branch=0):
        if full.is_set():
            raise OperationalError("database or disk is full")
        return await stored(conversation_id, events, history, branch)

    monkeypatch.setattr(eventlog, "store", store)
    await runs.start(conversation.id, user.pk, "go")
    await asyncio.sleep(0.5)
    full.set()
    started = time.monotonic()
    async with asyncio.timeout(10):
        await runs.wait(conversation.id)
    assert time.monotonic() - started < 5  # not the 10 s the answer would take
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.state == "error" and conversation.lease_owner == ""
    # The log kept what was stored before; the next prompt can run.
    assert await sync_to_async(Event.objects.filter(conversation=conversation).count)() > 0


def test_storage_full_recognises_the_drivers_errors():
    from django.db.utils import OperationalError

    from agent.runs.eventlog import storage_full

    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise OperationalError(*exc.args) from exc
    except OperationalError as wrapped:
        assert storage_full(wrapped)
    assert storage_full(OSError(errno.ENOSPC, "No space left on device"))
    disk_full = type("DiskFull", (Exception,), {"sqlstate": "53100"})
    assert storage_full(disk_full("could not write"))
    assert not storage_full(OperationalError("database is locked"))


@pytest.mark.django_db
def test_healthz_names_a_disk_without_room_or_a_state_dir_it_cannot_write(client, settings,
                                                                          tmp_path):  # fmt: skip
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    assert client.get("/healthz").status_code == 200
    settings.HARNESS_MIN_FREE_MB = 1 << 40  # more than any disk has
    body = client.get("/healthz")
    assert body.status_code == 503
    checks = body.json()
    assert checks["status"] == "error"
    assert checks["workspaces_disk"].startswith("error: disk full (")
    assert checks["database"] == "ok" and checks["channel_layer"] == "ok"
    settings.HARNESS_MIN_FREE_MB = 0
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    settings.VAR_DIR = blocker / "var"
    checks = client.get("/healthz").json()
    assert checks["state_dir"] == "error: cannot write: Not a directory", checks


@pytest.fixture
def loop_workspaces(settings):
    require_mounts()
    with small_disk(96) as disk:
        settings.HARNESS_WORKSPACES = disk / "workspaces"
        settings.HARNESS_WORKSPACE_STORAGE = "loop"
        settings.HARNESS_WORKSPACE_QUOTA_MB = QUOTA_MB
        yield disk / "workspaces"


def test_workspaces_are_mounted_once_by_concurrent_callers_and_again_after_a_reboot(
    loop_workspaces,
):
    from agent.runs.workspaces import sandbox_ids, workspace_for, workspace_path

    results, errors = [], []

    def prepare():
        try:
            results.append(workspace_for(41))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    path = workspace_path(41)
    points = [p for p, _, _ in storage.mounts() if p == str(path)]
    assert points == [str(path)]  # one mount, whoever came first
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == sandbox_ids(41) and st.st_mode & 0o777 == 0o700
    # No lost+found in the user's way; only the projects' directory (hidden from the tools).
    assert os.listdir(path) == [".harness-projects"]
    (path / "kept").write_text("survives")
    assert results[0].quota_mb == QUOTA_MB
    results.clear()
    gc.collect()
    storage.unmount_all(path)  # as a reboot leaves it: the image, no mount
    assert not os.path.ismount(path)
    workspace_for(41)
    assert os.path.ismount(path) and (path / "kept").read_text() == "survives"


def test_an_older_plain_workspace_is_moved_into_its_image_with_nothing_lost(
    loop_workspaces, settings
):
    from agent.runs.workspaces import sandbox_ids, workspace_for, workspace_path

    settings.HARNESS_WORKSPACE_STORAGE = "plain"
    path = workspace_for(42).root
    uid, gid = sandbox_ids(42)
    (path / "src").mkdir()
    (path / "src" / "main.py").write_text("print('hi')\n")
    os.chmod(path / "src" / "main.py", 0o750)
    (path / "data.bin").write_bytes(os.urandom(300_000))
    os.symlink("src/main.py", path / "link")
    for entry in ("src", "src/main.py", "data.bin"):
        os.chown(path / entry, uid, gid)
    before = {p.relative_to(path): (p.lstat().st_mode, p.lstat().st_uid,
                                    p.read_bytes() if p.is_file() and not p.is_symlink()
                                    else None) for p in path.rglob("*")}  # fmt: skip

    settings.HARNESS_WORKSPACE_STORAGE = "loop"
    workspace_for(42)
    assert os.path.ismount(workspace_path(42))
    after = {p.relative_to(path): (p.lstat().st_mode, p.lstat().st_uid,
                                   p.read_bytes() if p.is_file() and not p.is_symlink()
                                   else None) for p in path.rglob("*")}  # fmt: skip
    assert after == before
    leftovers = sorted(p.name for p in (loop_workspaces / ".images").iterdir())
    assert leftovers == ["42.ext4", "42.lock"]


def test_a_workspace_too_big_for_the_quota_is_left_as_it_was(loop_workspaces, settings):
    from agent.runs.workspaces import workspace_for
    from agent.server.storage import StorageError

    settings.HARNESS_WORKSPACE_STORAGE = "plain"
    path = workspace_for(43).root
    (path / "big").write_bytes(b"x" * ((QUOTA_MB + 1) << 20))
    settings.HARNESS_WORKSPACE_STORAGE = "loop"
    with pytest.raises(StorageError, match="its files are untouched"):
        workspace_for(43)
    assert not os.path.ismount(path) and (path / "big").stat().st_size == (QUOTA_MB + 1) << 20
    assert not (loop_workspaces / ".images" / "43.ext4").exists()
