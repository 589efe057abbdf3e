"""Runs inside a user's sandbox (no network), as the user, on the interpreter's standard
library alone: listens on the sandbox's own loopback and relays each connection, byte for
byte, to the git relay's Unix socket (bound into the sandbox), then runs the plan's git
commands one after another, so that none can start before the port is open.

    python -I -S forwarder.py SOCKET PORT SECONDS PLAN_JSON

The user's file host uses the same functions in-process for a clone (host_clone.py): its
port a free one, the relay's socket a descriptor it was sent, the output a pipe of its own.

PLAN_JSON is ``{"run": [step, ...], "cleanup": [argv, ...]}``: when a command fails or the
time runs out, the rest is not run and ``cleanup`` is (what a failed clone made goes).
A step is an argv, or ``{"argv": [...], "keep": NAME}``: its output (an object name, or
the command fails) is printed and kept, and ``{NAME}`` in a later argument becomes it; or
a file step done here, without a process: ``{"do": "rmtree" | "mkdir" | "rename" |
"branch", ...}`` (``branch``: the short name of the branch a repository's HEAD names,
printed).
The exit status is the failed command's (124: out of time), 0 when all succeeded.
"""

import contextlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",  # a fresh tmpfs: no user configuration to read
    "LANG": "C.UTF-8",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "/bin/false",
}


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def relay(client: socket.socket, path: str) -> None:
    # An answer comes in several writes (the relay's headers, chunks, the last empty
    # chunk): without this, Nagle holds a small one back until git's delayed ACK (about
    # 40 ms) while git waits for it before sending its next request.
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


class Listener:
    """A loopback port relayed to the relay's socket, until ``close``."""

    def __init__(self, server: socket.socket):
        self.server = server
        self.port = server.getsockname()[1]

    def close(self) -> None:
        # shutdown first: a close alone leaves the socket listening while the accepting
        # thread is blocked in accept() on it (the call holds it open)
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()


def listen(path: str, port: int) -> Listener:
    """Relays each connection to ``port`` on this sandbox's loopback (0: a free one) to
    the Unix socket ``path``, until the listener is closed."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(16)
    except OSError:
        server.close()
        raise

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed: the operation is over
                return
            threading.Thread(target=relay, args=(client, path), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return Listener(server)


OBJECT_NAME = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def say(out: int, text: str) -> None:
    os.write(out, (text + "\n").encode(errors="replace"))


def act(step: dict, out: int) -> int:
    """A file step (see above): 0, or 1 with what went wrong written to ``out``."""
    kind = step["do"]
    try:
        if kind == "rmtree":
            shutil.rmtree(step["path"], ignore_errors=True)
        elif kind == "mkdir":
            for path in step["paths"]:
                if step.get("parents"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.mkdir(path)
                if "mode" in step:
                    os.chmod(path, step["mode"])  # exactly, whatever the umask
        elif kind == "rename":
            os.rename(step["path"], step["to"])
        elif kind == "branch":
            with open(os.path.join(step["path"], "HEAD")) as f:
                head = f.read(4096).strip()
            if not head.startswith("ref: refs/heads/"):
                say(out, "harness: the repository's HEAD names no branch")
                return 1
            say(out, head.removeprefix("ref: refs/heads/"))
        else:
            raise ValueError(f"unknown step {kind!r}")
    except (OSError, ValueError) as exc:
        say(out, f"harness: {exc}")
        return 1
    return 0


def wait(child: subprocess.Popen, seconds: float) -> int:
    """``child``'s exit status once it ends, ``TimeoutExpired`` past ``seconds``. Its
    pidfd wakes us as it exits: ``Popen.wait(timeout)`` would look at growing intervals
    (up to 50 ms), a delay every step of the plan would pay."""
    pidfd = os.pidfd_open(child.pid)
    try:
        if not select.select([pidfd], [], [], seconds)[0]:
            raise subprocess.TimeoutExpired(child.args, seconds)
    finally:
        os.close(pidfd)
    return child.wait()


def run(plan: dict, seconds: float, out: int = 1, home: str | None = None) -> int:
    """The plan's steps, their output and git's (stdout and stderr) written to ``out``;
    ``home``: the commands' HOME, when not a fresh sandbox's /tmp."""
    env = GIT_ENV if home is None else {**GIT_ENV, "HOME": home}
    deadline = time.monotonic() + seconds
    code = 0
    kept: dict[str, str] = {}
    for step in plan["run"]:
        if isinstance(step, dict) and "do" in step:
            code = act(step, out)
            if code != 0:
                break
            continue
        keep = step.get("keep") if isinstance(step, dict) else None
        argv = step["argv"] if isinstance(step, dict) else step
        for name, value in kept.items():
            argv = [arg.replace("{" + name + "}", value) for arg in argv]
        left = deadline - time.monotonic()
        child = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE if keep else out, stderr=out,
                                 start_new_session=True)  # fmt: skip
        try:
            if keep:
                said, _ = child.communicate(timeout=max(left, 0.1))
                value = said.decode(errors="replace").strip()
                say(out, value)
                if child.returncode == 0 and not OBJECT_NAME.match(value):
                    say(out, f"harness: not an object name: {value[:80]!r}")
                    child.returncode = 1
                kept[keep] = value
                code = child.returncode
            else:
                code = wait(child, max(left, 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, 9)
            child.wait()
            say(out, f"harness: git ran past the time limit of {seconds:g} s and was stopped")
            code = 124
        if code != 0:
            break
    if code != 0:
        for argv in plan.get("cleanup", ()):
            subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                           check=False)  # fmt: skip
    return code


def main() -> None:
    path, port, seconds, plan = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    listen(path, port)
    sys.exit(run(json.loads(plan), seconds))


if __name__ == "__main__":
    main()
