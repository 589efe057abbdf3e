"""``manage.py`` commands for a test server, run one after another in one long-lived process.

A test asks a live server's database for many small things (an API token, a user, a row
changed through the ORM); a ``manage.py`` subprocess for each costs a Django start-up
(about a second of CPU) every time. This process starts Django once, with the server's
environment, and runs each command as ``manage.py`` would (``execute_from_command_line``:
the same parsing, output and exit status), closing its database connections after each
one so that it holds no lock and no connection between commands.

Requests are JSON lists of arguments, one a line on stdin; each answer is one JSON line
on the descriptor named by argv[1] (stdout belongs to the commands).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def serve(answers) -> None:
    import django
    from django.core.management import execute_from_command_line
    from django.db import connections

    django.setup()
    for line in sys.stdin:
        args = json.loads(line)
        stdout, stderr = io.StringIO(), io.StringIO()
        status = 0
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                execute_from_command_line(["manage.py", *args])
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except BaseException:
                traceback.print_exc()
                status = 1
            finally:
                connections.close_all()
        answers.write(json.dumps([status, stdout.getvalue(), stderr.getvalue()]) + "\n")
        answers.flush()


class ManageWorker:
    """The client side: one worker process for one environment, started on first use."""

    def __init__(self, env: dict[str, str], log: Path):
        self.env = dict(env)
        read_end, write_end = os.pipe()
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "testkit.manage_worker", str(write_end)],
                cwd=REPO, env=self.env, stdin=subprocess.PIPE, stdout=output,
                stderr=subprocess.STDOUT, pass_fds=(write_end,), text=True,
            )  # fmt: skip
        os.close(write_end)
        self.answers = os.fdopen(read_end, "r")
        atexit.register(self.close)  # a server a test never stopped

    def run(self, args: tuple[str, ...]) -> tuple[int, str, str]:
        try:
            self.process.stdin.write(json.dumps(list(args)) + "\n")
            self.process.stdin.flush()
            line = self.answers.readline()
        except (BrokenPipeError, ValueError):  # it died, or was closed
            line = ""
        if not line:
            self.close()
            raise RuntimeError(f"manage worker died running manage.py {' '.join(args)}")
        status, stdout, stderr = json.loads(line)
        return status, stdout, stderr

    def close(self) -> None:
        atexit.unregister(self.close)
        if self.process.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.answers.close()


if __name__ == "__main__":
    with os.fdopen(int(sys.argv[1]), "w") as answers:
        serve(answers)
