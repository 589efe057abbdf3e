"""A hostile repository configuration against Harness's own git (the seam every operation
goes through, agent/core/git.py), beyond the drivers tests/core/test_projects_git.py
plants: a signature program that ``log`` runs to verify a signed commit, and a transport
the repository allows by name, reached by rewriting a URL. An agent writes such
configuration wherever its bash may (with ``HARNESS_BASH=unsafe``, or through the
worktree's own ``commondir``, which names the repository whose configuration git reads)."""

from __future__ import annotations

import os
import uuid

import pytest

from agent.core.git import Git
from agent.core.projects import ops, repo
from agent.core.projects.layout import Layout


@pytest.fixture
def layout(tmp_path):
    project, conversation = uuid.uuid4().hex, uuid.uuid4().hex
    ops.run(str(tmp_path), "create", {"project": project})
    made = Layout.of(str(tmp_path), project, conversation)
    repo.add_worktree(made, "main")
    return made


def _program(tmp_path) -> tuple[str, str]:
    marker, program = tmp_path / "ran", tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    program.chmod(0o755)
    return str(marker), str(program)


def _seam(layout, *args: str, network: bool = False) -> dict:
    return ops.run(layout.root, "git", {"project": layout.project, "args": list(args),
                                        "network": network})[0]  # fmt: skip


def test_a_signature_program_is_not_run_to_show_a_signed_commit(tmp_path, layout):
    marker, program = _program(tmp_path)
    git = Git(layout.repo)
    tree = git.text("rev-parse", "main^{tree}")
    signed = (f"tree {tree}\nauthor a <a@a> 0 +0000\ncommitter a <a@a> 0 +0000\n"
              "gpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----\n"
              "\nsigned\n")  # fmt: skip
    commit = git.text("hash-object", "-t", "commit", "-w", "--stdin", stdin=signed.encode())
    git.run("update-ref", "refs/heads/signed", commit)
    with open(f"{layout.repo}/config", "a") as f:
        f.write(f'[gpg]\n\tformat = ssh\n[gpg "ssh"]\n\tprogram = {program}\n'
                f"\tallowedSignersFile = {tmp_path}/signers\n"
                f'[gpg "x509"]\n\tprogram = {program}\n'
                "[log]\n\tshowSignature = true\n")  # fmt: skip
    assert _seam(layout, "log", "-1", "signed")["code"] == 0
    _seam(layout, "verify-commit", "signed")
    assert not os.path.exists(marker)


def test_a_transport_the_repository_allows_by_name_is_still_refused(tmp_path, layout):
    marker, program = _program(tmp_path)
    with open(f"{layout.repo}/config", "a") as f:
        f.write(f'[protocol "ext"]\n\tallow = always\n[protocol "file"]\n\tallow = always\n'
                f'[url "ext::{program} %S "]\n\tinsteadOf = https://example.com/\n')  # fmt: skip
    done = _seam(layout, "ls-remote", "https://example.com/r.git", network=True)
    assert done["code"] != 0 and "not allowed" in done["err"], done
    assert not os.path.exists(marker)
    # The caller's own transports still work (a repository cannot turn them off either).
    with open(f"{layout.repo}/config", "a") as f:
        f.write('[protocol "https"]\n\tallow = never\n')
    done = _seam(layout, "ls-remote", "https://nowhere.invalid/r.git", network=True)
    assert "not allowed" not in done["err"], done
