"""The bash sandbox's self-test: one command through the real bubblewrap command line.

A host can have bwrap installed and still refuse it (no unprivileged user namespaces, a
seccomp profile that blocks them, Ubuntu 24.04's AppArmor restriction): every user's bash
then fails, one prompt at a time. The server runs this once at start-up (``start``, in a
thread, so Daphne does not wait), logs the outcome, and ``/healthz`` reports the cached
result. It is run again when what it depends on changes (the mode, the bwrap found on
PATH), and after a failure by the first probe ``RETRY_SECONDS`` later; a success is never
run again, so a probe of a healthy server never forks a sandbox.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time

from django.conf import settings

from agent.core.tools.bwrap import SANDBOX_PATH, SETPRIV, bwrap_path, sandbox_argv
from agent.sandbox import drop

log = logging.getLogger(__name__)

EXPECTED = "sandbox-ok"
TIMEOUT = 30
HINT = (
    "the host refuses the sandbox; see docs/DEPLOY.md, 'The bash sandbox on the host' "
    "(user namespaces, seccomp, AppArmor)"
)

# A failed self-test is run again by a probe this long after it: a sandbox that could not
# start on a host busy for a moment (a timeout) must not keep the server unhealthy for good,
# while a host that refuses it is still asked once per interval, not per probe.
RETRY_SECONDS = 10.0

_lock = threading.Lock()
_results: dict[tuple[str, str | None], tuple[str, float]] = {}


def sandbox_status() -> str:
    """``ok``, ``off (HARNESS_BASH=…)`` or ``error: …``; cached per mode and bwrap binary
    (an error for ``RETRY_SECONDS``)."""
    key = (settings.HARNESS_BASH, bwrap_path())
    with _lock:  # one self-test at a time; a probe arriving meanwhile waits for its result
        found = _results.get(key)
        stale = (
            found is not None
            and found[0].startswith("error")
            and (time.monotonic() - found[1] > RETRY_SECONDS)
        )
        if found is None or stale:
            found = _results[key] = (_run(*key), time.monotonic())
        return found[0]


def start() -> None:
    """Run the self-test in the background at server start and log what it found."""

    def report() -> None:
        status = sandbox_status()
        if status.startswith("error"):
            log.error("bash sandbox self-test failed: %s", status.removeprefix("error: "))
        else:
            log.info("bash sandbox self-test: %s", status)

    threading.Thread(target=report, name="sandbox-self-test", daemon=True).start()


def _run(mode: str, bwrap: str | None) -> str:
    if mode != "sandbox":
        return f"off (HARNESS_BASH={mode})"
    if bwrap is None:
        return "error: bubblewrap (bwrap) is not installed; install it or set HARNESS_BASH=off"
    client = drop.broker()
    if client is not None:  # a root server: its broker starts every sandbox
        return _through_broker(client)
    # As bash.py does: a root server drops the command to an unprivileged uid (one no user
    # has: users start at BASE + 1), so the self-test covers setpriv too.
    run_as = None
    if os.geteuid() == 0 and os.path.exists(SETPRIV):
        run_as = (settings.HARNESS_SANDBOX_UID_BASE, settings.HARNESS_SANDBOX_UID_BASE)
    directory = tempfile.mkdtemp(prefix="harness-selftest-")
    try:
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            proc = subprocess.run(
                sandbox_argv(bwrap, fd, f"echo {EXPECTED}", run_as),
                pass_fds=[fd], capture_output=True, text=True, timeout=TIMEOUT,
                env={"PATH": SANDBOX_PATH},
            )  # fmt: skip
        finally:
            os.close(fd)
    except subprocess.TimeoutExpired:
        return f"error: the sandboxed command did not finish within {TIMEOUT} s"
    except OSError as exc:
        return f"error: bwrap could not be started: {os.strerror(exc.errno or 0)}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    if proc.returncode == 0 and proc.stdout.strip() == EXPECTED:
        return "ok"
    said = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[0][:200]
    return f"error: bwrap exited with status {proc.returncode} ({said}); {HINT}"


def _through_broker(client) -> str:
    try:
        reply, _ = client.request("selftest")
    except RuntimeError as exc:
        return f"error: the broker could not start the sandbox: {exc}; {HINT}"
    if reply.get("exit") == 0 and str(reply.get("output", "")).strip() == EXPECTED:
        return "ok"
    said = (str(reply.get("output", "")).strip() or "no output").splitlines()[0][:200]
    return f"error: bwrap exited with status {reply.get('exit')} ({said}); {HINT}"
