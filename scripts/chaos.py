#!/usr/bin/env python
"""Load and chaos test: N simulated users chat over WebSocket while connections drop.

Each user has a signed-in session and a conversation of their own, sends prompts, and
receives the live stream the way the page does (seq-ranged batches; a sync on connect, on
a gap or an overlap). At random moments a user's socket is dropped mid-run and reconnected
after a random pause; with ``--follow-up-rate``, a follow-up is queued on a run as soon as
it has started (docs/API.md, "Queue": it runs in the same run, or as a new one if that had
ended); with ``--approval-rate``, a prompt makes the model call ``write`` in a conversation
that asks first (docs/API.md, "Approvals"), and the user approves the call from whichever
socket sees the card.
At the end every user's view is compared with the server's event log: events delivered,
lost and duplicated, per user and in total.

    python scripts/chaos.py --spawn --users 200            # own server + test model server
    python scripts/chaos.py --url http://127.0.0.1:8000    # a running server; users are
                                                           # created through manage.py with
                                                           # this environment (same DB)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

FINAL_PARTS = ("user", "text", "error")  # a streaming answer's live block is transient


class Frame(HTMLParser):
    """What a frame's HTML says, read from its elements' attributes (never from the markup's
    layout): its batch marker (the first element), the final parts with their seq, the
    approvals with their state, the status line's last state (a frame may carry a run's
    end and the next run's start: the page shows the last)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.marker: dict[str, str | None] | None = None
        self.parts: list[tuple[str, int]] = []
        self.approvals: dict[str, str] = {}
        self.state: str | None = None
        self.first = True
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if self.first:
            self.first = False
            if found.get("id") == "sync-state":
                self.marker = found
        classes = (found.get("class") or "").split()
        kind = found.get("data-part")
        if "part" in classes and kind in FINAL_PARTS and "live" not in classes:
            self.parts.append((kind, int(found["data-seq"])))
        if found.get("data-approval-id"):
            self.approvals[found["data-approval-id"]] = found.get("data-approval-state") or ""
        if found.get("id") == "status" and found.get("data-state"):
            self.state = found["data-state"]


APPROVE_ME = "[write a file]"  # a prompt with this makes the test model call write

SETUP = (
    "import json\nfrom bench.fixtures import sessions\nprint(json.dumps(sessions({n}, 'chaos')))"
)


@dataclass
class UserStats:
    name: str
    conversation: str
    session: str
    last_seq: int = 0
    applied: list[tuple[int, int]] = field(default_factory=list)
    parts_seen: dict[str, int] = field(default_factory=dict)  # (kind) -> count, by seq
    part_seqs: set = field(default_factory=set)
    frames: int = 0
    dropped_frames: int = 0
    syncs: int = 0
    disconnects: int = 0
    retries: int = 0  # reconnect attempts that failed and were tried again
    last_retry_error: str = ""
    prompts_done: int = 0
    follow_ups: int = 0
    approvals: int = 0  # tool calls approved
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Client:
    """The page's delivery protocol, without the page."""

    def __init__(self, stats: UserStats, ws_url: str, origin: str):
        self.s, self.ws_url, self.origin = stats, ws_url, origin
        self.syncing = False
        self.ws = None
        self.finished = False  # an applied batch carried the prompt's final status
        self.accepted = False  # an applied batch carried the prompt's user part
        self.users = 0  # user parts applied since the prompt was sent
        self.expected_users = 1  # the prompt's, and its follow-up's if one was queued
        # Approval cards seen and not yet shown decided: whether approve was sent (sent
        # again when the run goes quiet: a dropped socket may have lost it).
        self.pending: dict[str, bool] = {}
        self.approved: set[str] = set()

    async def connect(self, attempts: int = 6):
        """Connect, retrying with backoff and jitter as the page does (an overloaded
        server may let a handshake time out)."""
        from websockets.asyncio.client import connect

        for attempt in range(attempts):
            try:
                self.ws = await connect(
                    self.ws_url, origin=self.origin, open_timeout=20, max_size=None,
                    additional_headers={"Cookie": f"sessionid={self.s.session}"},
                )  # fmt: skip
                break
            except (OSError, TimeoutError, Exception) as exc:  # noqa: BLE001 - any failure
                if attempt == attempts - 1:
                    raise
                self.s.retries += 1
                self.s.last_retry_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(random.uniform(0, 2 ** min(attempt, 4)))
        self.syncing = False
        await self.sync()

    async def sync(self):
        if not self.syncing:
            self.syncing = True
            self.s.syncs += 1
            await self.ws.send(json.dumps({"action": "sync", "after": self.s.last_seq}))

    async def handle(self, message: str) -> None:
        self.s.frames += 1
        frame = Frame(message)
        if frame.marker is None:
            if 'data-part="error"' in message or 'data-outcome="refused"' in message:
                self.s.errors.append(re.sub(r"<[^>]+>", " ", message)[:200])
            return
        start, end = int(frame.marker["data-from"]), int(frame.marker["data-to"])
        if frame.marker.get("data-sync"):
            self.syncing = False
            if start == self.s.last_seq + 1:
                return self.apply(start, end, frame)
            self.s.dropped_frames += 1
            if end > self.s.last_seq:
                await self.sync()
            return
        if self.syncing:
            self.s.dropped_frames += 1
            return
        if start == self.s.last_seq + 1:
            return self.apply(start, end, frame)
        self.s.dropped_frames += 1
        if end > self.s.last_seq:
            await self.sync()

    def apply(self, start: int, end: int, frame: Frame) -> None:
        users = sum(1 for kind, _ in frame.parts if kind == "user")
        if users:
            self.accepted = True
            self.users += users
        if frame.state in ("idle", "error"):
            self.finished = self.accepted and self.users >= self.expected_users
        if end >= start:
            self.s.applied.append((start, end))
        self.s.last_seq = max(self.s.last_seq, end)
        for call_id, state in frame.approvals.items():
            if state == "pending":
                self.pending.setdefault(call_id, False)
            elif state in ("approve", "closed"):
                self.pending.pop(call_id, None)
        for key in frame.parts:
            self.s.parts_seen[key] = self.s.parts_seen.get(key, 0) + 1


async def run_user(
    stats: UserStats,
    base: str,
    prompts: int,
    drop_rate: float,
    rng,
    follow_up_rate: float = 0.0,
    approval_rate: float = 0.0,
) -> None:
    ws_base = base.replace("http://", "ws://").replace("https://", "wss://")
    client = Client(stats, f"{ws_base}/ws/c/{stats.conversation}/", base)
    await client.connect()
    for n in range(prompts):
        started = time.monotonic()
        client.finished = client.accepted = False
        client.users, client.expected_users = 0, 1
        follow_up = rng.random() < follow_up_rate
        tool = APPROVE_ME if rng.random() < approval_rate else ""
        await client.ws.send(json.dumps({"content": f"chaos prompt {n} from {stats.name}{tool}"}))
        # Drops happen mid-run: once the server has shown it took the prompt.
        drop_in = rng.uniform(0.05, 1.5) if rng.random() < drop_rate else None
        drop_at = None
        while not client.finished:
            if follow_up and client.accepted:  # queued on the run it started
                follow_up = False
                client.expected_users = 2
                stats.follow_ups += 1
                text = f"chaos follow-up {n} from {stats.name}"
                await client.ws.send(json.dumps({"content": text, "mode": "follow_up"}))
            for call_id, sent in list(client.pending.items()):
                if not sent:
                    stats.approvals += call_id not in client.approved
                    client.approved.add(call_id)
                    client.pending[call_id] = True
                    await client.ws.send(json.dumps({"action": "approve", "id": call_id}))
            if drop_in is not None and drop_at is None and client.accepted:
                drop_at = time.monotonic() + drop_in
            timeout = None if drop_at is None else max(0.0, drop_at - time.monotonic())
            quiet = 5.0  # like the page: a quiet run asks for what it may have missed
            try:
                message = await asyncio.wait_for(
                    client.ws.recv(), timeout=min(timeout, quiet) if timeout else quiet
                )
            except TimeoutError:
                if drop_at is None or time.monotonic() < drop_at:
                    if time.monotonic() - started > 120:
                        stats.errors.append("no answer within 120 s")
                        return
                    client.syncing = False
                    client.pending = dict.fromkeys(client.pending, False)  # sent again
                    await client.sync()
                    continue
                stats.disconnects += 1
                client.ws.transport.abort()  # drop it, as a network would
                drop_at, drop_in = None, None
                await asyncio.sleep(rng.uniform(0.05, 0.5))
                await client.connect()
                continue
            await client.handle(message)
        stats.prompts_done += 1
        stats.latencies.append(time.monotonic() - started)
    await client.ws.close()


def server_truth(base: str, stats: UserStats) -> dict[tuple[str, int], int]:
    request = urllib.request.Request(f"{base}/c/{stats.conversation}/",
                                     headers={"Cookie": f"sessionid={stats.session}"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        page = response.read().decode()
    truth: dict[tuple[str, int], int] = {}
    for key in Frame(page.split('id="messages"', 1)[1].split('id="sync-state"')[0]).parts:
        truth[key] = truth.get(key, 0) + 1
    return truth


def report(all_stats: list[UserStats], base: str, elapsed: float) -> dict:
    rows, totals = [], {"delivered": 0, "lost": 0, "duplicated": 0}
    for s in all_stats:
        truth = server_truth(base, s)
        lost = sum(1 for key in truth if key not in s.parts_seen)
        duplicated = sum(count - 1 for count in s.parts_seen.values() if count > 1)
        overlaps = sum(1 for (a, _), (_, b) in zip(s.applied[1:], s.applied, strict=False)
                       if a <= b)  # fmt: skip
        row = {"user": s.name, "delivered": len(s.parts_seen), "expected": len(truth),
               "lost": lost, "duplicated": duplicated + overlaps, "disconnects": s.disconnects,
               "syncs": s.syncs, "frames": s.frames, "prompts": s.prompts_done,
               "errors": s.errors[:3]}  # fmt: skip
        rows.append(row)
        totals["delivered"] += row["delivered"]
        totals["lost"] += row["lost"]
        totals["duplicated"] += row["duplicated"]
    latencies = [x for s in all_stats for x in s.latencies]
    summary = {
        "users": len(all_stats),
        "elapsed_s": round(elapsed, 2),
        **totals,
        "disconnects": sum(s.disconnects for s in all_stats),
        "reconnect_retries": sum(s.retries for s in all_stats),
        "syncs": sum(s.syncs for s in all_stats),
        "prompts_completed": sum(s.prompts_done for s in all_stats),
        "follow_ups": sum(s.follow_ups for s in all_stats),
        "approvals": sum(s.approvals for s in all_stats),
        "prompt_seconds_p50": round(statistics.median(latencies), 3) if latencies else None,
        "prompt_seconds_max": round(max(latencies), 3) if latencies else None,
        "errors": sum(len(s.errors) for s in all_stats),
    }
    return {"summary": summary, "users": rows}


def create_sessions(n: int, env: dict | None) -> list[UserStats]:
    command = [sys.executable, "manage.py", "shell", "-c", SETUP.format(n=n)]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return [UserStats(d["user"], d["conversation"], d["session"]) for d in data]


async def main_async(args, base: str, env: dict | None) -> dict:
    all_stats = create_sessions(args.users, env)
    rng = random.Random(args.seed)
    started = time.monotonic()
    results = await asyncio.gather(
        *(run_user(s, base, args.prompts, args.drop_rate, random.Random(rng.random()),
                   args.follow_up_rate, args.approval_rate) for s in all_stats),
        return_exceptions=True,
    )  # fmt: skip
    for stats, result in zip(all_stats, results, strict=True):
        if isinstance(result, BaseException):
            stats.errors.append(f"{type(result).__name__}: {result}")
    return report(all_stats, base, time.monotonic() - started)


def chaos_reply(body, answer: str):
    """The test model: a write call when the last user message is a prompt asking for one
    (not yet answered by a tool result), else the streamed answer."""
    from testkit.model_server import text_reply, tool_reply

    last = (body.get("messages") or [{}])[-1]
    blocks = last.get("content") if isinstance(last.get("content"), list) else []
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    if last.get("role") == "user" and any(APPROVE_ME in t for t in texts):
        return tool_reply(("write", {"path": "chaos.txt", "content": "approved"}))
    return text_reply(answer, delay=0.01, chunk=12)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (its environment must be this one's)")
    parser.add_argument(
        "--spawn",
        action="store_true",
        help="start a server (SQLite) and a test model server for the run",
    )
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per user")
    parser.add_argument(
        "--drop-rate",
        type=float,
        default=0.5,
        help="chance that a prompt's socket is dropped mid-run",
    )
    parser.add_argument(
        "--follow-up-rate",
        type=float,
        default=0.0,
        help="chance that a follow-up is queued on a prompt's run as soon as it started",
    )
    parser.add_argument(
        "--approval-rate",
        type=float,
        default=0.0,
        help="chance that a prompt's answer starts with a write call that waits for approval",
    )
    parser.add_argument("--words", type=int, default=120, help="words per streamed answer")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the full report to this file")
    parser.add_argument("--database-url", help="with --spawn: e.g. postgres://… (default SQLite)")
    parser.add_argument("--redis-url", help="with --spawn: use channels-redis")
    args = parser.parse_args(argv)
    if not (args.url or args.spawn):
        parser.error("give --url or --spawn")
    if args.spawn:
        from testkit.live import LiveServer
        from testkit.model_server import ModelServer

        model = ModelServer().start()
        answer = " ".join(f"word{i}" for i in range(args.words))
        model.fallback = lambda body: chaos_reply(body, answer)
        root = Path(tempfile.mkdtemp(prefix="harness-chaos-"))
        limit = str(args.prompts * 20 + 10)  # (queued follow-ups count too)
        server = LiveServer(root, ANTHROPIC_API_KEY="chaos", ANTHROPIC_BASE_URL=model.url,
                            HARNESS_BASH="off", HARNESS_RUNS_PER_MINUTE=limit,
                            HARNESS_CONCURRENT_RUNS="3", DJANGO_DEBUG="1",
                            HARNESS_APPROVAL="ask" if args.approval_rate else "auto")  # fmt: skip
        if args.database_url:
            server.env["DATABASE_URL"] = args.database_url
        if args.redis_url:
            server.env["REDIS_URL"] = args.redis_url
        server.start()
        try:
            result = asyncio.run(main_async(args, server.url, server.env))
        finally:
            server.stop()
            print(f"server log: {server.log}", file=sys.stderr)
            model.stop()
    else:
        result = asyncio.run(main_async(args, args.url.rstrip("/"), None))
    print(json.dumps(result["summary"], indent=2))
    bad = [u for u in result["users"] if u["lost"] or u["duplicated"] or u["errors"]]
    for row in bad[:10]:
        print("problem:", json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
