"""Archives unpacked through a user's real file host: the broker (in this root process,
over its real socket) starts the host in bubblewrap as the user's uid, the upload is
streamed to it in chunks, and what it makes belongs to the user; a hostile archive is
refused with its entry named and nothing kept, the staged upload included."""

from __future__ import annotations

import io
import os
import socket
import stat
import sys
import tarfile
import threading

import pytest

from agent.core.archive_formats import ArchiveError
from agent.core.projects.layout import PROJECTS_DIR
from agent.core.tools.workspace import PathError, Workspace
from agent.sandbox import archive_ops, client, project_mounts
from agent.sandbox.broker import Broker
from agent.sandbox.layout import HOMES
from agent.sandbox.spawn import BrokerConfig
from tests.conftest import REPO, require_bwrap

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")

UID_BASE = 310_000
USER = 7
LIMITS = {"max_bytes": 64 << 20, "max_entries": 100_000}


def _python() -> tuple[str, str]:
    python = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not python.startswith(prefix + "/"):
        python = os.path.join(prefix, "bin", f"python{sys.version_info[0]}")
    return prefix, python


@pytest.fixture
def workspace(tmp_path):
    require_bwrap()
    prefix, python = _python()
    config = BrokerConfig(service_uid=65534, service_gid=65534, uid_base=UID_BASE,
                          workspaces=str(tmp_path / "workspaces"), cgroups="off",
                          python_prefix=prefix, python=python, app=str(REPO))  # fmt: skip
    root = tmp_path / "workspaces" / str(USER)
    root.mkdir(parents=True, mode=0o700)
    os.chown(root, UID_BASE + USER, UID_BASE + USER)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:  # as the broker's ``workspace`` request makes every workspace
        project_mounts.ensure_dir(fd, (UID_BASE + USER, UID_BASE + USER))
    finally:
        os.close(fd)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    broker = Broker(config)
    threading.Thread(target=broker.serve, args=(theirs,), daemon=True).start()
    space = Workspace(root)
    space.sandbox = client.Broker(ours).sandbox(USER)
    yield space
    ours.close()
    broker.shutdown()
    space.close()


def _tar_gz(*files: tuple[str, bytes, int], links: tuple[tuple[str, str], ...] = ()) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data, mode in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def _left(workspace: Workspace) -> list[str]:
    return sorted(set(os.listdir(workspace.root)) - {HOMES, PROJECTS_DIR})


def test_an_archive_streamed_to_the_host_is_unpacked_as_the_user(workspace):
    big = os.urandom(9 << 20)  # incompressible: three chunks on the wire
    data = _tar_gz(("repo-main/src/big.bin", big, 0o644),
                   ("repo-main/tools/run.sh", b"#!/bin/sh\necho hi\n", 0o755),
                   links=(("repo-main/latest", "src/big.bin"),))  # fmt: skip
    assert len(data) > 2 * archive_ops.CHUNK
    done = archive_ops.unpack_upload(workspace, io.BytesIO(data), "project", LIMITS, len(data))
    assert done == {"path": "project", "entries": 3, "bytes": len(big) + 18,
                    "stripped": "repo-main"}  # fmt: skip
    root = workspace.root / "project"
    assert (root / "src" / "big.bin").read_bytes() == big
    assert os.readlink(root / "latest") == "src/big.bin"
    assert stat.S_IMODE(os.stat(root / "tools" / "run.sh").st_mode) == 0o755
    for path in (root, root / "src", root / "src" / "big.bin", root / "latest"):
        assert os.lstat(path).st_uid == UID_BASE + USER, path
    assert _left(workspace) == ["project"]  # the staged upload had no name, and is gone


@pytest.mark.parametrize(
    "data, why",
    [
        (_tar_gz(("a", b"x", 0o644), links=(("link", "/etc"),)), "'link'"),
        (_tar_gz(("../../escape", b"x", 0o644)), "'../../escape'"),
    ],
)
def test_a_hostile_archive_is_refused_by_the_host_and_nothing_is_kept(workspace, data, why):
    with pytest.raises(ArchiveError) as caught:
        archive_ops.unpack_upload(workspace, io.BytesIO(data), "project", LIMITS, len(data))
    assert why in str(caught.value)
    assert _left(workspace) == []


def test_the_owners_bounds_hold_in_the_host(workspace):
    bomb = _tar_gz(("zeros", bytes(32 << 20), 0o644))
    small = {"max_bytes": 1 << 20, "max_entries": 100_000}
    with pytest.raises(ArchiveError, match="more than the 1 MB"):
        archive_ops.unpack_upload(workspace, io.BytesIO(bomb), "project", small, len(bomb))
    with pytest.raises(ArchiveError, match="larger than the 100 bytes"):
        archive_ops.unpack_upload(workspace, io.BytesIO(bomb), "project", LIMITS, 100)
    assert _left(workspace) == []


def test_the_kernel_refuses_what_the_user_may_not_write(workspace):
    """The host is the user: a root-owned directory in their workspace stays closed."""
    closed = workspace.root / "root-only"
    closed.mkdir(mode=0o700)
    data = _tar_gz(("f", b"x", 0o644))
    with pytest.raises(PathError, match="permission denied"):
        archive_ops.unpack_upload(workspace, io.BytesIO(data), "root-only/project", LIMITS,
                                  len(data))  # fmt: skip
    assert os.listdir(closed) == []


def test_without_a_broker_a_file_worker_unpacks_as_the_owner(tmp_path):
    """A root process with no broker (print mode, tests) unpacks with the owner's
    filesystem identity: what it makes is the owner's, not root's."""
    root = tmp_path / "plain"
    root.mkdir(mode=0o700)
    os.chown(root, UID_BASE + 8, UID_BASE + 8)
    space = Workspace(root)
    data = _tar_gz(("dir/f", b"x", 0o644))
    try:
        done = archive_ops.unpack_upload(space, io.BytesIO(data), "p", LIMITS, len(data))
    finally:
        space.close()
    assert done["entries"] == 1 and done["stripped"] == "dir"
    for path in (root / "p", root / "p" / "f"):
        assert os.stat(path).st_uid == UID_BASE + 8, path
