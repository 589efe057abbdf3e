"""What does a prompt's start cost the server in CPU, before the model is asked?

Two steps run for every prompt sent from the page: the socket's credential check of the
prompt frame (``socket_access``) and the run's claim (``claim._claim_together``: access,
quotas, the claim's UPDATE; then ``claim._prepare_blocking``: the workspace, a plain folder
here, and the system prompt), in groups of 10 as prompts arriving together are claimed.
Each is timed in CPU time (other processes on the machine do not count) over ``--prompts``
users, each with a conversation and a signed-in session, in a fresh SQLite database of its
own, after one untimed round; the queries each step runs are counted too. Under a burst
these are what every prompt pays on the event loop's core.

    python -m bench.start_cost                 # prints the figures as JSON
    python -m bench.start_cost --prompts 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

GROUP = 10  # claims made together (agent/server/grouping.py groups what arrives at once)


def _setup(root: Path) -> None:
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "harness_site.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
        "HARNESS_WORKSPACES": str(root / "workspaces"),
        # (a user's workspace is made once in their life, not per prompt: plain folders)
        "HARNESS_WORKSPACE_STORAGE": "plain",
        "ANTHROPIC_API_KEY": "sk-bench-not-used",  # (a real model's config: budgets apply)
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
    })  # fmt: skip
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _timed(call) -> tuple[float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        started = time.process_time()
        call()
        spent = time.process_time() - started
    return spent, len(queries)


def measure(prompts: int) -> dict:
    from django.contrib.auth import HASH_SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from agent.models import User
    from agent.runs import claim
    from agent.web.revocation import socket_access
    from bench import fixtures

    def people(prefix: str) -> list[tuple]:
        rows = fixtures.sessions(prompts, prefix)
        ids = dict(User.objects.filter(username__startswith=prefix)
                   .values_list("username", "pk"))  # fmt: skip
        hashes = [SessionStore(session_key=r["session"])[HASH_SESSION_KEY] for r in rows]
        return [(r["conversation"], ids[r["user"]], r["session"], auth_hash)
                for r, auth_hash in zip(rows, hashes, strict=True)]  # fmt: skip

    def checks(items) -> None:
        for conversation, user, session, auth_hash in items:
            assert socket_access(conversation, user, session, auth_hash)[0] is None

    def claims(items) -> None:
        requests = [claim._Claim(c, u, "hello", True) for c, u, _, _ in items]
        for start in range(0, len(requests), GROUP):
            for setup in claim._claim_together(requests[start : start + GROUP]):
                assert isinstance(setup, claim.Setup), setup
                claim._prepare_blocking(setup)
                assert setup.unprepared is None, setup.unprepared

    warm = people("warm")
    checks(warm)
    claims(warm)
    items = people("timed")
    figures = {}
    for name, step in (("socket_check", checks), ("claim", claims)):
        spent, queries = _timed(lambda step=step: step(items))
        figures[name] = {"cpu_ms_per_prompt": round(spent / prompts * 1000, 2),
                         "queries_per_prompt": round(queries / prompts, 1)}  # fmt: skip
    return {"prompts": prompts, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-start-cost-") as root:
        _setup(Path(root))
        print(json.dumps(measure(options.prompts), indent=2))


if __name__ == "__main__":
    main()
