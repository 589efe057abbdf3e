"""git with nothing of the repository's able to run a program: the one way Harness runs git.

A project's repository is hostile input: its owner's agent edits ``.git/config`` in bash,
and a clone brings ``.gitattributes``. git runs programs named by configuration (hooks,
``core.fsmonitor``, filters, diff and merge drivers, pagers, editors, credential helpers,
``core.sshCommand``, archive compressors, transports), so every git command here gets:

- an environment with no system or global configuration (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``), an empty HOME, no terminal prompt, no pager;
- command-line configuration (``GIT_CONFIG_COUNT``: git's highest precedence, over the
  repository's) that neutralises every program-running setting, and for each filter, diff
  and merge driver the repository's configuration names (read first, itself with the
  neutralising configuration), its commands blanked;
- a time limit and an output bound.

Aliases never replace git's own commands, and only built-in commands are run here. This
module only builds and runs the command line; where it runs (as the owner's uid, inside
their sandbox) is the caller's business (agent/sandbox/projects.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass

GIT = "git"
TIMEOUT = 60.0
OUTPUT_CAP = 16 * 1024 * 1024
EMPTY_HOME = "/nonexistent"  # a HOME with nothing in it: no ~/.gitconfig, no ~/.config/git

# Settings that would make git run a program, each set to a value that runs nothing.
NEUTRAL = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "false"),
    ("core.gitProxy", ""),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),
    ("credential.helper", ""),  # an empty value resets the list
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("gpg.program", "false"),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("tar.tar.gz.command", ""),
    ("tar.tgz.command", ""),
)
# Drivers a repository's configuration may name, and the keys that hold their commands.
DRIVERS = re.compile(
    r"^(filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)|merge\..+\.driver"
    r"|tar\..+\.command|remote\..+\.(uploadpack|receivepack|vcs)|alias\..+"
    r"|gpg\..+\.program|gpg\.ssh\.defaultkeycommand|credential\..+\.helper"
    r"|trailer\..+\.(command|cmd)|(difftool|mergetool)\..+\.cmd)$",
    re.IGNORECASE,
)
# A transport the repository allows by name (``protocol.ext.allow=always`` beats the
# command line's ``protocol.allow=never``; ``url.<ext::…>.insteadOf`` then runs it).
PROTOCOLS = re.compile(r"^protocol\..+\.allow$", re.IGNORECASE)
MAX_DRIVERS = 200


class GitError(Exception):
    """git failed: its message (stderr, bounded), and its exit status."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Result:
    code: int
    out: bytes
    err: str


def environment(extra: dict[str, str] | None = None, path: str = "") -> dict[str, str]:
    env = {
        "PATH": path or os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": EMPTY_HOME,
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat",
        "GIT_EDITOR": "false",
        "GIT_ASKPASS": "",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_AUTHOR_NAME": "Harness",
        "GIT_AUTHOR_EMAIL": "harness@localhost",
        "GIT_COMMITTER_NAME": "Harness",
        "GIT_COMMITTER_EMAIL": "harness@localhost",
    }
    env.update(extra or {})
    return env


def with_config(env: dict[str, str], pairs) -> dict[str, str]:
    """``env`` with ``pairs`` as command-line configuration (keys and values apart: no
    quoting of a hostile driver name can change what is set)."""
    env = dict(env)
    pairs = list(pairs)
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def run(args: list[str], *, cwd: str, env: dict[str, str], stdin: bytes = b"",
        timeout: float = TIMEOUT, cap: int = OUTPUT_CAP) -> Result:  # fmt: skip
    """One git process, bounded: killed past ``timeout``; output past ``cap`` is an error."""
    proc = subprocess.Popen(
        [GIT, "--no-pager", *args], cwd=cwd, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    out, err = bytearray(), bytearray()
    over = threading.Event()

    def drain(stream, into: bytearray, limit: int) -> None:
        while chunk := stream.read(65536):
            if len(into) < limit:
                into += chunk[: limit - len(into)]
            elif not over.is_set():
                over.set()
                proc.kill()

    readers = [
        threading.Thread(target=drain, args=(proc.stdout, out, cap), daemon=True),
        threading.Thread(target=drain, args=(proc.stderr, err, 65536), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        if stdin:
            proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise GitError(f"git {args[0]} did not finish within {timeout:g} s") from None
    for reader in readers:
        reader.join(5)
    if over.is_set():
        raise GitError(f"git {args[0]} wrote more than {cap} bytes")
    return Result(code, bytes(out), err.decode(errors="replace").strip()[-4000:])


class Git:
    """git on one repository (``git_dir``), hardened as above. ``extra_config``: what a
    caller adds (the network half allows its transports here). ``common_dir``: the
    repository's own directory, pinned (``GIT_COMMON_DIR``, ``GIT_OBJECT_DIRECTORY``) so
    that neither a worktree's ``commondir`` file nor a moved ``objects`` names another
    one for its configuration and objects. git's files ref backend still reads
    ``<git_dir>/commondir`` for refs: callers check it (agent/core/projects/pinned.py)."""

    def __init__(self, git_dir: str, *, path: str = "", timeout: float = TIMEOUT,
                 extra_config: tuple[tuple[str, str], ...] = (),
                 common_dir: str | None = None):  # fmt: skip
        self.git_dir = git_dir
        self.pins = {"GIT_DIR": git_dir}
        if common_dir is not None:
            self.pins.update(GIT_COMMON_DIR=common_dir,
                             GIT_OBJECT_DIRECTORY=f"{common_dir}/objects")  # fmt: skip
        self.base_env = environment(path=path)
        self.timeout = timeout
        self.extra_config = tuple(extra_config)
        self._drivers: tuple[tuple[str, str], ...] | None = None

    def config(self) -> list[tuple[str, str]]:
        # The caller's transports last: a repository's ``protocol.http.allow`` is undone.
        return [*NEUTRAL, *self.drivers(), *self.extra_config]

    def drivers(self) -> tuple[tuple[str, str], ...]:
        """Every driver command the repository's configuration (its includes too) names,
        blanked. Read on each Git (one per operation): an agent may add one any time."""
        if self._drivers is None:
            env = with_config({**self.base_env, **self.pins}, NEUTRAL)
            result = run(["config", "--includes", "--null", "--get-regexp", "."],
                         cwd="/", env=env, timeout=self.timeout, cap=4 << 20)  # fmt: skip
            if result.code not in (0, 1):
                raise GitError(result.err or "git could not read the repository's configuration")
            found = []
            for item in result.out.split(b"\0"):
                key = item.split(b"\n", 1)[0].decode(errors="replace")
                if PROTOCOLS.match(key):
                    found.append((key, "never"))
                elif DRIVERS.match(key):
                    found.append((key, ""))
                    if key.lower().startswith("filter."):
                        # A required filter that runs nothing would fail every add.
                        found.append((key.rsplit(".", 1)[0] + ".required", "false"))
            if len(found) > MAX_DRIVERS:
                raise GitError("the repository's configuration names too many drivers")
            self._drivers = tuple(found)
        return self._drivers

    def env(self, work_tree: str | None = None, index: str | None = None,
            extra: dict[str, str] | None = None) -> dict[str, str]:  # fmt: skip
        env = {**self.base_env, **(extra or {}), **self.pins}
        if work_tree is not None:
            env["GIT_WORK_TREE"] = work_tree
        if index is not None:
            env["GIT_INDEX_FILE"] = index
        return with_config(env, self.config())

    def run(self, *args: str, work_tree: str | None = None, index: str | None = None,
            stdin: bytes = b"", extra: dict[str, str] | None = None, check: bool = True,
            cap: int = OUTPUT_CAP) -> Result:  # fmt: skip
        result = run(list(args), cwd=work_tree or self.git_dir,
                     env=self.env(work_tree, index, extra), stdin=stdin,
                     timeout=self.timeout, cap=cap)  # fmt: skip
        if check and result.code != 0:
            raise GitError(result.err or f"git {args[0]} failed ({result.code})", result.code)
        return result

    def text(self, *args: str, **kw) -> str:
        return self.run(*args, **kw).out.decode(errors="replace").strip()
