"""Uploaded archives (agent/core/archives.py): hostile ones are refused whole, naming the
entry, with nothing written; good ones unpack exactly. Every archive is built here, with
the standard library's own writers, byte for byte what an attacker could upload."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import warnings
import zipfile

import pytest

from agent.core.archive_formats import ArchiveError, reader_for
from agent.core.archive_write import write_plan
from agent.core.archives import Limits, plan, unpack

LIMITS = Limits(max_bytes=8 << 20)


def tar_gz(*entries: tuple) -> bytes:
    """(kind, name, payload[, mode]) each: payload is a file's bytes or a link's target."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for kind, name, *rest in entries:
            info = tarfile.TarInfo(name)
            payload = rest[0] if rest else b""
            info.mode = rest[1] if len(rest) > 1 else 0o644
            data = None
            if kind == "file":
                payload = payload.encode() if isinstance(payload, str) else payload
                info.size, data = len(payload), io.BytesIO(payload)
            else:
                info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                             "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                             "device": tarfile.CHRTYPE}[kind]  # fmt: skip
                if kind in ("symlink", "hardlink"):
                    info.linkname = payload
            tar.addfile(info, data)
    return out.getvalue()


ZIP_TYPES = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK,
             "fifo": stat.S_IFIFO, "device": stat.S_IFCHR, "socket": stat.S_IFSOCK}  # fmt: skip


def zip_(*entries: tuple, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name; we mean it
        with zipfile.ZipFile(out, "w", method) as archive:
            for kind, name, *rest in entries:
                payload = rest[0] if rest else b""
                mode = rest[1] if len(rest) > 1 else 0o644
                info = zipfile.ZipInfo(name + ("/" if kind == "dir" else ""))
                info.create_system = 3
                info.external_attr = (ZIP_TYPES[kind] | mode) << 16
                info.compress_type = method
                data = payload.encode() if isinstance(payload, str) else payload
                archive.writestr(info, data)
    return out.getvalue()


BUILDERS = {"tar.gz": tar_gz, "zip": zip_}


@pytest.fixture
def parent(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def refused(data: bytes, parent, limits: Limits = LIMITS) -> ArchiveError:
    """The archive is refused, and nothing at all was made."""
    path, fd = parent
    with pytest.raises(ArchiveError) as caught:
        unpack(io.BytesIO(data), fd, "project", limits)
    assert os.listdir(path) == []
    return caught.value


def unpacked(data: bytes, parent, limits: Limits = LIMITS):
    path, fd = parent
    checked = unpack(io.BytesIO(data), fd, "project", limits)
    return path / "project", checked


# -- hostile ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "a/b/../../../evil", "/etc/evil"])
def test_a_name_leaving_the_root_is_refused(fmt, name, parent):
    error = refused(BUILDERS[fmt](("file", "ok.txt", b"fine"), ("file", name, b"x")), parent)
    assert name in str(error)
    assert "absolute" in str(error) or "leaves the root" in str(error)


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize("target", ["../outside", "a/../../x", "/etc/passwd", "../../.."])
def test_a_symlink_pointing_out_is_refused(fmt, target, parent):
    archive = BUILDERS[fmt](("dir", "a"), ("symlink", "link", target))
    assert "link" in str(refused(archive, parent))


@pytest.mark.parametrize("fmt", BUILDERS)
def test_symlinks_that_each_stay_inside_but_escape_together_are_refused(fmt, parent):
    """``here -> .`` stays in the root, and so does ``up -> here/..`` read as text; the
    kernel resolves the second to the root's parent."""
    archive = BUILDERS[fmt](("symlink", "here", "."), ("symlink", "up", "here/.."))
    error = refused(archive, parent)
    assert "'up'" in str(error) and "out of the archive's root" in str(error)


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize("target", ["/tmp", "sub", "."])
def test_a_file_through_an_earlier_symlink_is_refused(fmt, target, parent):
    """The classic: a link first, then a file named through it; even a link that stays
    inside may not carry a later entry."""
    archive = BUILDERS[fmt](("dir", "sub"), ("symlink", "link", target),
                            ("file", "link/planted", b"owned"))  # fmt: skip
    error = refused(archive, parent)
    assert "link/planted" in str(error)


@pytest.mark.parametrize("target", ["../outside", "/etc/passwd", "link", "missing", "dir"])
def test_a_hardlink_to_anything_but_an_earlier_file_is_refused(target, parent):
    archive = tar_gz(("dir", "dir"), ("symlink", "link", "dir"),
                     ("hardlink", "copy", target), ("file", "missing", b"later"))  # fmt: skip
    error = refused(archive, parent)
    assert "'copy'" in str(error)


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_devices_and_fifos_are_refused(fmt, kind, parent):
    error = refused(BUILDERS[fmt](("file", "ok", b"x"), (kind, "node")), parent)
    assert "'node'" in str(error) and ("device" in str(error) or "FIFO" in str(error))


def test_a_zip_socket_is_refused(parent):
    assert "socket" in str(refused(zip_(("socket", "sock")), parent))


@pytest.mark.parametrize("fmt", BUILDERS)
def test_too_many_entries_are_refused(fmt, parent):
    entries = [("file", f"f{i}", b"") for i in range(11)]
    error = refused(BUILDERS[fmt](*entries), parent, Limits(max_bytes=1 << 20, max_entries=10))
    assert "more than 10 entries" in str(error)
    unpacked(BUILDERS[fmt](*entries[:10]), parent, Limits(max_bytes=1 << 20, max_entries=10))


@pytest.mark.parametrize("fmt", BUILDERS)
def test_a_bomb_is_refused_by_what_it_unpacks_to(fmt, parent):
    """64 MB of zeros in well under a megabyte, against an 8 MB quota."""
    zeros = bytes(64 << 20)
    data = BUILDERS[fmt](("file", "bomb", zeros))
    assert len(data) < 1 << 20
    error = refused(data, parent)
    assert "more than the 8 MB" in str(error) and "'bomb'" in str(error)


@pytest.mark.parametrize("fmt", BUILDERS)
def test_a_bomb_under_the_quota_is_refused_by_its_ratio(fmt, parent):
    data = BUILDERS[fmt](*[("file", f"part{i}", bytes(16 << 20)) for i in range(4)])
    error = refused(data, parent, Limits(max_bytes=1 << 30))
    assert "zip bomb" in str(error)


def test_a_zip_whose_declared_sizes_lie_is_refused(parent):
    """The central directory says 4 bytes; what inflates is 1 MB: the reader stops at
    the declared size, and the checksum then refuses it."""
    data = bytearray(zip_(("file", "liar", bytes(1 << 20))))
    real = (1 << 20).to_bytes(4, "little")
    at = data.rfind(b"PK\x01\x02")  # the central directory entry: its size at +24
    assert data[at + 24 : at + 28] == real
    data[at + 24 : at + 28] = (4).to_bytes(4, "little")
    assert "cannot be read" in str(refused(bytes(data), parent))


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize("second", ["file", "dir", "symlink"])
def test_a_name_given_twice_is_refused(fmt, second, parent):
    archive = BUILDERS[fmt](("file", "same", b"first"), (second, "same", "second"))
    assert "appears twice" in str(refused(archive, parent))


@pytest.mark.parametrize("fmt", BUILDERS)
@pytest.mark.parametrize(
    "name",
    [".git/config", "sub/.GIT/hooks/post-checkout", "GIT~1/config", ".git./x", "a\nb", "a\\b"],
)
def test_names_git_or_a_reader_would_mistake_are_refused(fmt, name, parent):
    refused(BUILDERS[fmt](("file", name, b"[core]\n\tfsmonitor = evil\n")), parent)


@pytest.mark.parametrize("fmt", BUILDERS)
def test_names_too_long_or_too_deep_are_refused(fmt, parent):
    refused(BUILDERS[fmt](("file", "x" * 256, b"")), parent)
    refused(BUILDERS[fmt](("file", "d/" * 130 + "f", b"")), parent)


def test_what_is_not_an_archive_is_refused(parent):
    assert "neither" in str(refused(b"#!/bin/sh\nrm -rf /\n", parent))
    assert "cannot be read" in str(refused(b"\x1f\x8b" + os.urandom(200), parent))
    assert "cannot be read" in str(refused(tar_gz(("file", "a", os.urandom(5000)))[:-300], parent))


def test_an_archive_changed_between_its_check_and_its_writing_leaves_nothing(parent):
    """The writer trusts no plan either: a file producing other bytes than were counted
    stops it, and the half-made directory goes."""
    path, fd = parent
    checked = plan(io.BytesIO(tar_gz(("file", "a/f", b"short"))), LIMITS)
    other = io.BytesIO(tar_gz(("file", "a/f", b"much longer than it was")))
    checked.entries[0].member = next(iter(reader_for(other, 10, 1 << 20).members()))
    with pytest.raises(ArchiveError, match="changed between its check"):
        write_plan(checked, reader_for(other, 10, 1 << 20), fd, "project")
    assert os.listdir(path) == []


def test_an_existing_destination_is_not_touched(parent):
    path, fd = parent
    (path / "project").mkdir()
    (path / "project" / "mine").write_text("kept")
    with pytest.raises(FileExistsError):
        unpack(io.BytesIO(tar_gz(("file", "mine", b"theirs"))), fd, "project", LIMITS)
    assert (path / "project" / "mine").read_text() == "kept"


# -- good ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", BUILDERS)
def test_a_good_archive_unpacks_exactly(fmt, parent):
    archive = BUILDERS[fmt](
        ("dir", "proj-main", "", 0o755),
        ("file", "proj-main/src/deep/er/module.py", b"print('hi')\n"),
        ("file", "proj-main/run.sh", b"#!/bin/sh\necho ok\n", 0o775),
        ("file", "proj-main/secret-mode", b"x", 0o4777),
        ("dir", "proj-main/empty", "", 0o700),
        ("symlink", "proj-main/docs/readme", "../src/deep/er/module.py"),
        ("symlink", "proj-main/latest", "src/deep"),
    )
    root, checked = unpacked(archive, parent)
    assert checked.stripped == "proj-main"
    assert sorted(os.listdir(root)) == ["docs", "empty", "latest", "run.sh", "secret-mode", "src"]
    assert (root / "src/deep/er/module.py").read_bytes() == b"print('hi')\n"
    assert stat.S_IMODE(os.stat(root / "run.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "secret-mode").st_mode) == 0o755  # no setuid kept
    assert stat.S_IMODE(os.stat(root / "src/deep/er/module.py").st_mode) == 0o644
    assert (root / "empty").is_dir() and os.listdir(root / "empty") == []
    assert stat.S_IMODE(os.stat(root / "empty").st_mode) == 0o755
    assert os.readlink(root / "docs/readme") == "../src/deep/er/module.py"
    assert (root / "latest" / "er" / "module.py").read_bytes() == b"print('hi')\n"
    assert checked.total == len(b"print('hi')\n#!/bin/sh\necho ok\nx")


def test_a_tar_hardlink_becomes_a_copy(parent):
    root, _ = unpacked(tar_gz(("file", "a", b"data"), ("hardlink", "b", "a"),
                              ("hardlink", "c", "b")), parent)  # fmt: skip
    for name in "abc":
        assert (root / name).read_bytes() == b"data"
        assert os.stat(root / name).st_nlink == 1


def test_no_common_top_directory_is_stripped_when_there_is_none(parent):
    root, checked = unpacked(zip_(("file", "one/a", b"1"), ("file", "two/b", b"2")), parent)
    assert checked.stripped is None and sorted(os.listdir(root)) == ["one", "two"]
    root2 = unpacked_again(tar_gz(("file", "only/file", b"1"), ("file", "only", b"2")), parent)
    assert root2 is None


def unpacked_again(data: bytes, parent):
    path, fd = parent
    try:
        unpack(io.BytesIO(data), fd, "second", LIMITS)
    except ArchiveError:
        return None  # "only" is a file with an entry below it
    return path / "second"


def test_a_zip_made_elsewhere_without_unix_modes_unpacks(parent):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("folder/", b"")
        archive.writestr("folder/notes.txt", b"notes")
    root, checked = unpacked(out.getvalue(), parent)
    assert checked.stripped == "folder" and (root / "notes.txt").read_bytes() == b"notes"


def test_an_empty_archive_unpacks_to_an_empty_directory(parent):
    root, checked = unpacked(zip_(), parent)
    assert os.listdir(root) == [] and checked.entries == []


def test_a_loop_of_symlinks_is_refused(parent):
    error = refused(tar_gz(("symlink", "a", "b"), ("symlink", "b", "a/x")), parent)
    assert "loop" in str(error)


def test_a_tar_header_larger_than_any_real_one_is_refused_before_it_is_read(parent):
    """tarfile reads a pax header whole, into memory: 9 MB of it is refused unread."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("f")
        info.pax_headers = {"comment": "x" * (9 << 20)}
        tar.addfile(info, io.BytesIO(b""))
    assert "header is larger" in str(refused(out.getvalue(), parent))


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_what_git_archive_makes_unpacks_as_the_repository_was(fmt, parent, tmp_path):
    """GitHub's downloads are ``git archive``: a prefix directory, a global pax header
    with the commit id (tar), Unix modes and symlinks (zip)."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "main.py").write_text("print(1)\n")
    (repo / "build.sh").write_text("#!/bin/sh\n")
    (repo / "build.sh").chmod(0o755)
    (repo / "link").symlink_to("src/main.py")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    data = subprocess.run([*git, "archive", f"--format={fmt}", "--prefix=repo-main/", "HEAD"],
                          check=True, capture_output=True).stdout  # fmt: skip
    os.rename(repo, tmp_path / "elsewhere")  # the link must not resolve to the original
    root, checked = unpacked(data, parent)
    assert checked.stripped == "repo-main"
    assert (root / "src" / "main.py").read_text() == "print(1)\n"
    assert os.readlink(root / "link") == "src/main.py"
    assert stat.S_IMODE(os.stat(root / "build.sh").st_mode) == 0o755
