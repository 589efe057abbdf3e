"""`make run` and bubblewrap: installed when it can be (root with apt-get), else one clear
line on how to get it; never an error that stops the server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ensure-bwrap.sh"


def stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def system(tmp_path):
    """A PATH of stubs: `id -u` answers the uid given; `apt-get` records its calls and
    'installs' a bwrap stub."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"

    def run(uid: int, apt: bool = True, bwrap: bool = False, **env: str):
        stub(bin_dir, "id", f"echo {uid}")
        if apt:
            stub(bin_dir, "apt-get", f'echo "$*" >> {log}\n'
                 f'case "$1" in install) printf "#!/bin/sh\\n" > {bin_dir}/bwrap; '
                 f"/bin/chmod +x {bin_dir}/bwrap ;; esac")  # fmt: skip
        if bwrap:
            stub(bin_dir, "bwrap", "exit 0")
        done = subprocess.run(
            ["/bin/sh", str(SCRIPT)], env={"PATH": str(bin_dir), **env},
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        calls = log.read_text().splitlines() if log.exists() else []
        return done, calls

    return run


def test_nothing_happens_when_bwrap_is_there(system):
    done, calls = system(uid=1000, bwrap=True)
    assert done.returncode == 0 and done.stdout == "" and calls == []


def test_root_with_apt_get_installs_it(system):
    done, calls = system(uid=0)
    assert done.returncode == 0
    assert calls == ["update -qq", "install -y -qq bubblewrap"]
    assert "is not installed" not in done.stdout


@pytest.mark.parametrize(("uid", "apt"), [(1000, True), (0, False)])  # not root; no apt-get
def test_otherwise_one_line_says_how_to_install_it(system, uid, apt):
    done, calls = system(uid=uid, apt=apt)
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and calls == []
    assert len(lines) == 1 and "sudo apt-get install bubblewrap" in lines[0]
    assert "bash tool is off" in lines[0]


def test_a_failed_install_says_so_and_the_server_still_starts(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub(bin_dir, "id", "echo 0")
    stub(bin_dir, "apt-get", "exit 100")  # no network, say
    done = subprocess.run(["/bin/sh", str(SCRIPT)], capture_output=True, text=True, timeout=30,
                          env={"PATH": str(bin_dir)})  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith("Could not install bubblewrap with apt-get")


@pytest.mark.parametrize("mode", ["off", "unsafe"])
def test_no_sandbox_wanted_no_sandbox_installed(system, mode):
    done, calls = system(uid=0, HARNESS_BASH=mode)
    assert done.stdout == "" and calls == []


def test_make_run_runs_it_before_serving():
    done = subprocess.run(["make", "-n", "run"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MAKEFLAGS": ""})  # fmt: skip
    lines = done.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if "scripts/ensure-bwrap.sh" in line)
    serve = next(i for i, line in enumerate(lines) if "daphne" in line)
    assert check < serve
