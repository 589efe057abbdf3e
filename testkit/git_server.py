"""A real git remote on loopback for tests: smart HTTP, ``git http-backend`` as CGI behind
a tiny threaded HTTP server, HTTP Basic auth required on every request.

Bare repositories live in a temporary directory (``make_repository`` fills one with a
first commit); pushes are enabled. Tests read what it saw (``requests``: method, path and
the Authorization header each came with) and can make it misbehave: ``endless`` answers
a fetch's ref advertisement with refs that never end, ``hold`` keeps a fetch's answer back until the
test releases it (the client's processes can then be inspected mid-transfer), ``public``
lets fetches through without a credential.

    with GitServer(user="alice", token="s3cret") as server:
        server.make_repository("demo.git")
        url = server.url("demo.git")      # http://127.0.0.1:PORT/demo.git
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BACKEND = "/usr/lib/git-core/git-http-backend"
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
           "GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
           "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com",
           "PATH": "/usr/bin:/bin"}  # fmt: skip


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None


def git(*args: str, cwd: str | Path | None = None) -> str:
    """A plain git command (no user or system configuration); its stdout."""
    done = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class GitServer:
    def __init__(self, user: str = "git-user", token: str = "git-token"):
        self.user, self.token = user, token
        self.root = Path(tempfile.mkdtemp(prefix="harness-git-remote-"))
        self.requests: list[Seen] = []
        self.endless = False
        self.public = False  # True: fetches need no credential (pushes still do)
        self.hold = threading.Event()
        self.hold.set()  # set: answers go out at once
        self.held = threading.Event()  # set when an answer is being held back
        handler = type("Handler", (_Handler,), {"remote": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> GitServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> GitServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, name: str) -> str:
        return f"http://{self.host}/{name}"

    def make_repository(self, name: str, files: dict[str, str] | None = None,
                        branch: str = "main") -> Path:  # fmt: skip
        """A bare repository ``name`` whose ``branch`` holds one commit of ``files``."""
        bare = self.root / name
        git("init", "--bare", "-q", "-b", branch, str(bare))
        git("config", "http.receivepack", "true", cwd=bare)
        work = Path(tempfile.mkdtemp(prefix="harness-git-work-"))
        try:
            git("init", "-q", "-b", branch, cwd=work)
            for path, text in (files or {"README.md": "# demo\n"}).items():
                (work / path).parent.mkdir(parents=True, exist_ok=True)
                (work / path).write_text(text)
            git("add", "-A", cwd=work)
            git("commit", "-q", "-m", "first", cwd=work)
            git("push", "-q", str(bare), f"{branch}:{branch}", cwd=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return bare

    def commit_on(self, name: str, branch: str, path: str, text: str) -> str:
        """A new commit on the remote's ``branch`` (what someone else pushed); its hash."""
        work = Path(tempfile.mkdtemp(prefix="harness-git-work-"))
        try:
            git("clone", "-q", "-b", branch, str(self.root / name), str(work))
            (work / path).write_text(text)
            git("add", "-A", cwd=work)
            git("commit", "-q", "-m", f"change {path}", cwd=work)
            git("push", "-q", "origin", branch, cwd=work)
            return git("rev-parse", "HEAD", cwd=work).strip()
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def head_of(self, name: str, branch: str) -> str:
        return git("rev-parse", f"refs/heads/{branch}", cwd=self.root / name).strip()


class _Handler(BaseHTTPRequestHandler):
    remote: GitServer
    protocol_version = "HTTP/1.0"  # one request per connection; the body ends at close

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _authorised(self) -> bool:
        expected = base64.b64encode(f"{self.remote.user}:{self.remote.token}".encode()).decode()
        return self.headers.get("Authorization") == f"Basic {expected}"

    def _serve(self) -> None:
        remote = self.remote
        remote.requests.append(Seen(self.command, self.path, self.headers.get("Authorization")))
        body = self._body()
        reading = "git-upload-pack" in self.path
        if not self._authorised() and not (remote.public and reading):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test remote"')
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"authentication required\n")
            return
        if remote.endless and "git-upload-pack" in self.path:
            self._endless()
            return
        fetch = self.command == "POST" and self.path.endswith("/git-upload-pack")
        if fetch and not remote.hold.is_set():
            remote.held.set()
            remote.hold.wait()
        path, _, query = self.path.partition("?")
        env = {
            **GIT_ENV,
            "GIT_PROJECT_ROOT": str(remote.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": remote.user,
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        done = subprocess.run([BACKEND], input=body, env=env, capture_output=True, timeout=120)
        head, _, out = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(out)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _endless(self) -> None:
        """A ref advertisement that never ends: valid lines, one branch after another."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
        self.end_headers()
        first = b"# service=git-upload-pack\n"
        try:
            self.wfile.write(b"%04x" % (len(first) + 4) + first + b"0000")
            for n in range(10**9):
                line = b"1" * 40 + b" refs/heads/b%09d\n" % n
                self.wfile.write(b"%04x" % (len(line) + 4) + line)
        except OSError:
            pass


def main() -> None:  # a remote to try by hand: python -m testkit.git_server
    server = GitServer().start()
    server.make_repository("demo.git")
    print(f"{server.url('demo.git')} (user {server.user}, token {server.token})", flush=True)
    try:
        threading.Event().wait()
    finally:
        server.stop()


if __name__ == "__main__":
    os.umask(0o022)
    main()
