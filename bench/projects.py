"""Projects (issue 31's targets): a checkpoint of a 10,000-file worktree after a one-file
change, a restore of one of its checkpoints, a clone through the product against a plain
``git clone --bare`` of the same repository from the same server (the product keeps a bare
repository), and the repository ready to work in (the clone, then a conversation's
worktree checked out) against a plain ``git clone`` (which checks the files out too).

The remote is testkit/git_server.py on loopback (git's own http-backend), holding one
commit of ``files`` small files, and a larger repository of the same tree whose files
carry ``LARGE_BYTES`` more of incompressible text each (about 40 MB at 10,000 files): the
product's clone costs a fixed amount over git's, which a small repository's transfer does
not hide. Each product clone is paired with a plain one just before it, in the same
process, so that the machine's load at that moment weighs on both alike.

Each path is measured in a child process of its own (``python -m bench.projects``) with a
throwaway SQLite database and workspaces:

- ``core``: agent/core/projects/ops.py called in-process on a plain directory, no sandbox:
  git's own cost, the floor of the others;
- ``oneshot``: the product's calls (agent/runs/projects.py, agent/runs/git_remote.py) on a
  server without a broker: each project operation starts a one-shot bwrap sandbox
  (as the user's uid when the bench runs as root), the clone goes through the git relay;
- ``host``: the same calls after the child dropped root as the deployed server does
  (agent/sandbox/drop.py): the broker, the user's file host and its worker for the
  conversation (agent/sandbox/project_workers.py); the clone by the file host itself
  (agent/sandbox/host_clone.py). Root only.

The one-file change is written the way the product writes a file (the conversation's
workspace: through the user's file host under a broker).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"checkpoint_p50_ms": 100.0, "restore_p50_ms": 1000.0, "clone_ratio": 1.2}
CHANGED = "src/d000/f00000.txt"  # the file every run changes
LARGE_BYTES = 3000
CHILD_TIMEOUT = 1800


def _files(count: int) -> dict[str, str]:
    """``count`` small text files, 100 to a directory (a source tree's shape)."""
    return {f"src/d{n // 100:03d}/f{n:05d}.txt": f"file {n}\n" + f"x = compute({n})\n" * 12
            for n in range(count)}  # fmt: skip


def _large_files(count: int) -> dict[str, str]:
    """``_files`` with ``LARGE_BYTES`` of random text appended to each (random, so that
    the pack is as large as the tree: a real source tree compresses less than ours)."""
    import base64
    import random

    noise = random.Random(31)
    return {path: text + base64.b64encode(noise.randbytes(LARGE_BYTES * 3 // 4)).decode()
            for path, text in _files(count).items()}  # fmt: skip


def _stats(values: list[float]) -> dict:
    ordered = sorted(values)

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))], 1)

    return {"p50_ms": at(50), "p99_ms": at(99), "count": len(values)}


def _timed(values: list[float]) -> dict:
    """``_stats`` and the median, which the clone ratios compare."""
    return {**_stats(values), "median_ms": round(statistics.median(values), 1)}


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


# -- in the child --------------------------------------------------------------------------
def _checkpoints(checkpoint, write, restore, runs: int, restores: int) -> dict:
    """The first checkpoint, ``runs`` more after a one-file change each, ``restores``
    restores alternating between the first and the last checkpoint (each changes the one
    file back or forth)."""
    started = time.perf_counter()
    first = checkpoint()
    result = {"first_ms": round(_ms(started), 1)}
    if not first:
        raise RuntimeError("the first checkpoint recorded nothing")
    times, last = [], first
    for n in range(runs):
        write(f"changed {n}\n".encode())
        started = time.perf_counter()
        last = checkpoint()
        times.append(_ms(started))
        if not last or last["files"] != [CHANGED]:
            raise RuntimeError(f"a checkpoint after a one-file change said {last!r}")
    result["after_one_change"] = _stats(times)
    times = []
    for n in range(restores):
        target = (first if n % 2 == 0 else last)["id"]
        started = time.perf_counter()
        done = restore(target)
        times.append(_ms(started))
        if not done.get("after") or done["after"]["files"] != [CHANGED]:
            raise RuntimeError(f"a restore said {done!r}")
    result["restore"] = _stats(times)
    return result


def _core(remote: str, runs: int, restores: int) -> dict:
    from agent.core.projects import ops
    from agent.core.projects.layout import Layout

    root = tempfile.mkdtemp(prefix="harness-bench-core-")
    try:
        args = {"project": secrets.token_hex(16), "conversation": secrets.token_hex(16)}
        layout = Layout.of(root, args["project"], args["conversation"])
        ops.run(root, "prepare", args)
        subprocess.run(["git", "clone", "--bare", "-q", remote, layout.repo], check=True)
        made, _ = ops.run(root, "add_worktree", {**args, "base": "main"})
        base = made["base_commit"]

        def write(data: bytes) -> None:
            Path(layout.tree, CHANGED).write_bytes(data)

        result = _checkpoints(
            lambda: ops.run(root, "checkpoint", {**args, "base": base})[0]["checkpoint"],
            write,
            lambda target: ops.run(root, "restore", {**args, "base": base, "target": target})[0],
            runs, restores,
        )  # fmt: skip
        return {"path": "agent/core/projects/ops.py in-process, no sandbox", **result}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _clone(user, remote: str, name: str):
    """The product's clone of ``remote`` (a project row, the relay, git in the sandbox,
    the outcome stored): the project, and the milliseconds it took."""
    import asyncio

    from agent.models import Project
    from agent.runs import git_remote
    from agent.runs import projects as projects_

    project = projects_.reserve(user, name=name, git_url=remote)
    started = time.perf_counter()
    asyncio.run(git_remote.clone_project(project.id))
    took = _ms(started)
    project.refresh_from_db()
    if project.state != Project.State.READY:
        raise RuntimeError(f"the clone failed: {project.error}")
    return project, took


def _product(mode: str, remote: str, large: str, runs: int, restores: int,
             clones: int) -> dict:  # fmt: skip
    from agent.models import Conversation, User
    from agent.runs import projects as projects_
    from agent.runs.workspaces import conversation_workspace, workspace_for

    user = User.objects.create(username="bench-projects")
    clone_ms, plain_ms, ready_ms, conversation = [], [], [], None
    for n in range(clones):
        plain_ms += _plain_clones(remote, 1)
        project, took = _clone(user, remote, f"bench {n}")
        clone_ms.append(took)
        # Ready to work in: a conversation's worktree checked out (as `git clone` does).
        started = time.perf_counter()
        conversation = Conversation.objects.create(owner=user, model="bench", project=project)
        projects_.add_worktree(conversation, project.default_branch)
        ready_ms.append(took + _ms(started))
    large_ms, large_plain_ms = [], []
    for n in range(clones):
        large_plain_ms += _plain_clones(large, 1)
        large_ms.append(_clone(user, large, f"bench large {n}")[1])
    workspace = conversation_workspace(conversation)

    def write(data: bytes) -> None:
        if workspace.sandbox is not None:  # under a broker: the user's file host writes it
            workspace.sandbox.submit(workspace.write, (CHANGED, data)).result(60)
        else:
            workspace.write(CHANGED, data)

    result = _checkpoints(lambda: projects_.checkpoint(conversation), write,
                          lambda target: projects_.restore(conversation, target),
                          runs, restores)  # fmt: skip
    broker = workspace_for(user.pk).sandbox is not None
    path = ("the broker and the user's file host (agent/sandbox/host.py); the clone by the "
            "file host itself (agent/sandbox/host_clone.py)" if broker else
            "a one-shot bwrap sandbox per operation (agent/sandbox/projects.py); the clone "
            "in bwrap started by the server")  # fmt: skip
    as_uid = "as the user's own uid" if os.geteuid() == 0 or broker else "as the bench's user"
    return {
        "path": f"{path}, {as_uid}; the clone through the git relay",
        **result,
        "clone": _timed(clone_ms),
        "plain_clone": _timed(plain_ms),
        "ready": _timed(ready_ms),
        "clone_large": _timed(large_ms),
        "plain_clone_large": _timed(large_plain_ms),
    }


def child(argv: list[str]) -> None:
    """``python -m bench.projects MODE REMOTE LARGE RUNS RESTORES CLONES``: one path
    measured, its figures as JSON on the last line of stdout."""
    mode, remote, large, runs, restores, clones = argv[0], argv[1], argv[2], *map(int, argv[3:6])
    if mode == "core":
        print(json.dumps(_core(remote, runs, restores)), flush=True)
        return
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "harness_site.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if mode == "host":
        from agent.sandbox import drop

        if drop.start() is None:
            raise RuntimeError("no broker: the file host path needs the bench to run as root")
    try:
        print(json.dumps(_product(mode, remote, large, runs, restores, clones)), flush=True)
    finally:  # the paired plain clones
        for path in _leftovers:
            shutil.rmtree(path, ignore_errors=True)


# -- in the benchmark's process ------------------------------------------------------------
def _run_child(mode: str, remote, runs: int, restores: int, clones: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"harness-bench-{mode}-"))
    os.chmod(root, 0o755)  # the dropped server and the sandboxes pass through it
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "HARNESS_", "DJANGO_", "DATABASE_", "REDIS_"))
    }
    env.update({
        "DJANGO_SETTINGS_MODULE": "harness_site.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
        "HARNESS_WORKSPACES": str(root / "workspaces"),
        "HARNESS_WORKSPACE_STORAGE": "plain",
        "HARNESS_AGENT_STATE": str(root / "agent-state"),
        "HARNESS_EGRESS_ALLOW": remote.host,
        "HARNESS_GIT_TIMEOUT": "600",
    })  # fmt: skip
    _leftovers.append(str(root))
    done = subprocess.run(
        [sys.executable, "-m", "bench.projects", mode, remote.url("big.git"),
         remote.url("large.git"), str(runs), str(restores), str(clones)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip() or done.stdout.strip())[-1500:]}
    return json.loads(lines[-1])


def _plain_clones(url: str, count: int, bare: bool = True) -> list[float]:
    """``git clone --bare`` (or, ``bare`` False, ``git clone`` with its checkout) from the
    same server, no configuration but git's defaults."""
    times = []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"}
    for _ in range(count):
        target = tempfile.mkdtemp(prefix="harness-bench-plain-")
        _leftovers.append(target)
        env["HOME"] = target
        started = time.perf_counter()
        subprocess.run(["git", "clone", *(["--bare"] if bare else []), "-q", url,
                        f"{target}/repo.git"], check=True, env=env)  # fmt: skip
        times.append(_ms(started))
    return times


# Directories removed once every figure is taken: on a disk mounted with `discard` (this
# machine's), removing 10,000 files slows the file creations that follow for seconds.
_leftovers: list[str] = []


def modes() -> list[str]:
    """The paths this machine can measure: the sandboxes need bubblewrap, the broker root."""
    found = ["core"]
    if shutil.which("bwrap"):
        found.append("oneshot")
        if os.geteuid() == 0:
            found.append("host")
    return found


def measure(files: int = 10_000, runs: int = 30, restores: int = 7, clones: int = 9) -> dict:
    from testkit.git_server import GitServer

    try:
        with GitServer() as remote:
            return _measure(remote, files, runs, restores, clones)
    finally:
        for path in _leftovers:
            shutil.rmtree(path, ignore_errors=True)
        _leftovers.clear()


def _measure(remote, files: int, runs: int, restores: int, clones: int) -> dict:
    remote.public = True  # no credential: the plain clone and the product's alike
    started = time.perf_counter()
    remote.make_repository("big.git", _files(files))
    remote.make_repository("large.git", _large_files(files))
    made_s = time.perf_counter() - started
    plain = _plain_clones(remote.url("big.git"), clones)
    checked_out = _plain_clones(remote.url("big.git"), clones, bare=False)
    result = {"files": files, "runs": runs, "restores": restores, "clones": clones,
              "repository_made_s": round(made_s, 1), "targets": TARGETS,
              # Other work on the machine moves these figures by 2x: said beside them.
              "load_average_1m": round(os.getloadavg()[0], 2),
              "plain_clone": _timed(plain), "plain_clone_checked_out": _timed(checked_out),
              "paths": {}}  # fmt: skip
    skipped = {"oneshot": "bubblewrap (bwrap) is not installed",
               "host": "the broker needs root (the bench runs unprivileged)"}  # fmt: skip
    for mode in ("core", "oneshot", "host"):
        if mode not in modes():
            result["paths"][mode] = {"skipped": skipped[mode]}
            continue
        figures = _run_child(mode, remote, runs, restores, clones)
        if "clone" in figures:  # against the plain clones paired with the product's
            figures["clone_ratio"] = round(
                figures["clone"]["median_ms"] / figures["plain_clone"]["median_ms"], 2
            )
            figures["clone_large_ratio"] = round(
                figures["clone_large"]["median_ms"]
                / figures["plain_clone_large"]["median_ms"], 2
            )  # fmt: skip
            figures["ready_ratio"] = round(
                figures["ready"]["median_ms"] / result["plain_clone_checked_out"]["median_ms"],
                2,
            )
        result["paths"][mode] = figures
        print(f"projects, {mode}: " + _summary(figures), file=sys.stderr, flush=True)
    return result


def _summary(figures: dict) -> str:
    if "skipped" in figures or "error" in figures:
        return figures.get("skipped") or f"FAILED: {figures['error'][-300:]}"
    cp, restore = figures["after_one_change"], figures["restore"]
    text = (f"checkpoint after a one-file change p50 {cp['p50_ms']} / p99 {cp['p99_ms']} ms "
            f"({cp['count']} runs; first {figures['first_ms']} ms); restore p50 "
            f"{restore['p50_ms']} ms")  # fmt: skip
    if "clone_ratio" in figures:
        text += (f"; clone {figures['clone']['median_ms']} ms (x{figures['clone_ratio']} "
                 f"its paired plain clones' {figures['plain_clone']['median_ms']}); "
                 f"ready to work in {figures['ready']['median_ms']} ms "
                 f"(x{figures['ready_ratio']}); the larger repository's clone "
                 f"{figures['clone_large']['median_ms']} ms (x{figures['clone_large_ratio']} "
                 f"{figures['plain_clone_large']['median_ms']})")  # fmt: skip
    return text


def lines(report: dict) -> list[str]:
    """The table's projects section: each path's figures against issue 31's targets."""
    plain = report["plain_clone"]
    out = [
        f"projects: a worktree of {report['files']:,} files; targets: checkpoint after a "
        f"one-file change <= {TARGETS['checkpoint_p50_ms']:g} ms p50, restore <= "
        f"{TARGETS['restore_p50_ms']:g} ms p50, clone <= x{TARGETS['clone_ratio']} a plain "
        f"`git clone --bare` ({plain['median_ms']} ms, median of {plain['count']}; each "
        f"product clone is set against a plain one made just before it); ready "
        f"to work in (the clone and a worktree) against a plain `git clone` with its checkout "
        f"({report['plain_clone_checked_out']['median_ms']} ms); load average before: "
        f"{report['load_average_1m']}",
    ]
    for mode, figures in report["paths"].items():
        out.append(f"  {mode:>7}: {_summary(figures)}")
        if "path" in figures:
            out.append(f"           ({figures['path']})")
    return out


if __name__ == "__main__":
    child(sys.argv[1:])
