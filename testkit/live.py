"""A live Harness server (Daphne, in a subprocess) for browser and load tests."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from testkit.manage_worker import ManageWorker

REPO = Path(__file__).resolve().parent.parent
# Commands a long-lived worker runs (no Django start-up each); the others (migrate, check:
# what a test of start-up runs) get a process of their own, as `manage.py` would.
WORKER_COMMANDS = frozenset({"shell", "create_api_token"})
# DATABASE_URLs migrated in this process: a second server on one database (a restart, a
# cluster's second node) does not migrate it again.
MIGRATED: set[str] = set()
_template_lock = threading.Lock()
_template: list[Path] = []


def migrated_sqlite_template() -> Path:
    """An empty, migrated SQLite database, made once per process: a server's database is a
    copy of it rather than a `migrate` of its own (seconds per server)."""
    with _template_lock:
        if not _template:
            directory = Path(tempfile.mkdtemp(prefix="harness-migrated-"))
            atexit.register(shutil.rmtree, directory, True)
            LiveServer(directory).manage("migrate", "-v", "0")
            _template.append(directory / "db.sqlite3")
        return _template[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collect_static(server: LiveServer) -> None:
    """The static files every server serves (hashed, gzipped: harness_site/settings.py),
    collected when ``static/`` changed since: servers and test processes share them."""
    import fcntl

    manifest, sources = REPO / "public" / "static" / "staticfiles.json", REPO / "static"
    manifest.parent.parent.mkdir(exist_ok=True)
    with open(REPO / "public" / "static.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        newest = max(path.stat().st_mtime for path in sources.rglob("*"))
        if not manifest.exists() or manifest.stat().st_mtime < newest:
            server.manage("collectstatic", "--noinput", "-v", "0")


class LiveServer:
    """Daphne serving the project with its own SQLite database and workspaces."""

    def __init__(self, root: Path, **env: str):
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("ANTHROPIC_", "HARNESS_", "DJANGO_"))}  # fmt: skip
        self.env.update({
            "DJANGO_DEBUG": "1",
            # The product's settings, unless this process asks for others (the test suite
            # asks for testkit/live_settings.py: tests/conftest.py).
            "DJANGO_SETTINGS_MODULE": os.environ.get("HARNESS_LIVE_SETTINGS",
                                                     "harness_site.settings"),
            "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
            "HARNESS_WORKSPACES": str(root / "workspaces"),
            # No loop mount per user of a throwaway server (they would outlive it); a test
            # of workspace quotas passes HARNESS_WORKSPACE_STORAGE=loop and unmounts.
            "HARNESS_WORKSPACE_STORAGE": "plain",
            # /healthz fails while the bash sandbox cannot run (its start-up self-test);
            # on a host without bubblewrap a test server has no bash instead.
            "HARNESS_BASH": "sandbox" if shutil.which("bwrap") else "off",
            "PYTHONUNBUFFERED": "1",
            **env,
        })  # fmt: skip
        self.process: subprocess.Popen | None = None
        self.log = root / "daphne.log"
        self.worker: ManageWorker | None = None
        self.worker_lock = threading.Lock()

    def manage(self, *args: str, input: str | None = None) -> str:
        if input is None and args[:1] and args[0] in WORKER_COMMANDS:
            with self.worker_lock:
                status, stdout, stderr = self._worker().run(args)
        else:
            proc = subprocess.run(
                [sys.executable, "manage.py", *args], cwd=REPO, env=self.env,
                capture_output=True, text=True, input=input, timeout=120,
            )  # fmt: skip
            status, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        if status:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{stderr}")
        return stdout

    def _worker(self) -> ManageWorker:
        if self.worker is not None and self.worker.env != self.env:  # a test changed env
            self.close_worker()
        if self.worker is None:
            self.worker = ManageWorker(self.env, self.root / "manage.log")
        return self.worker

    def close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def migrate(self) -> None:
        """Migrates the server's database, unless this process did already: a new SQLite
        file is a copy of the migrated template."""
        url = self.env["DATABASE_URL"]
        path = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
        if path is not None and not path.exists():
            shutil.copyfile(migrated_sqlite_template(), path)
            os.chmod(path, 0o600)
        elif url not in MIGRATED:
            self.manage("migrate", "-v", "0")
        MIGRATED.add(url)

    def create_users(self, *names: str) -> None:
        code = (
            "from agent.models import User\n"
            f"for name in {list(names)!r}:\n"
            "    User.objects.create_user(name, password=f'pw-{name}-1234')\n"
        )
        self.manage("shell", "-c", code)

    def start(self) -> LiveServer:
        self.migrate()
        collect_static(self)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port),
             "harness_site.asgi:application"],
            cwd=REPO, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60  # a loaded machine (a parallel run) starts slowly
        said = ""  # the last /healthz answer: which check failed
        while True:
            try:
                # A generous wait per probe: under load /healthz (its checks) answers slowly.
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=15) as response:
                    if json.loads(response.read())["status"] == "ok":
                        return self
            except urllib.error.HTTPError as exc:
                said = exc.read().decode(errors="replace")[:2000]
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()  # a server that never became healthy must not outlive the test
                raise RuntimeError(f"daphne did not start: /healthz said {said or 'nothing'}"
                                   f"\n{self.log.read_text()[-3000:]}")  # fmt: skip
            time.sleep(0.15)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as in a crash."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.close_worker()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
