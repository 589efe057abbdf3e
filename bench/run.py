"""The benchmark run: start the stamped model and the product (plain Daphne), measure,
print a table and write the figures as JSON under ``var/bench/``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import platform
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import latency, page, projects, render_cost

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Options:
    levels: list[int] = field(default_factory=lambda: [1, 25, 100, 250])
    tokens: int = 300  # deltas per answer: 6 s at 50/s
    rate: float = 50.0
    spread: float = 1.0  # seconds over which a level's streams start
    idle_prompts: int = 20  # Enter → first token on an idle server: prompts one by one
    burst: int = 100  # … and under a burst: this many prompts sent at once
    idle_sessions: int = 250
    long_events: int = 2000
    render_tokens: int = 20_000
    database_url: str | None = None
    redis_url: str | None = None
    processes: int = 1  # Daphne processes (more than one needs redis_url)
    out: Path = REPO / "var" / "bench"
    only: str | None = None  # "projects" (no server, no model) or "streaming": that alone
    project_files: int = 10_000  # the worktree checkpointed and restored, the repo cloned
    project_runs: int = 30  # checkpoints after a one-file change, per path


# -- processes -------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Upstream:
    """``python -m bench.upstream`` in a process of its own (its CPU is not the server's)."""

    def __init__(self, tokens: int, rate: float):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.upstream", "--tokens", str(tokens), "--rate", str(rate)],
            cwd=REPO, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the benchmark model did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


class Cluster:
    """The product as deployed: DEBUG off, plain Daphne; ``processes`` of them on ports of
    their own, sharing the database (and Redis, which more than one needs). Sessions are
    spread over them round-robin, as a load balancer with sticky sessions would."""

    def __init__(self, root: Path, options: Options, model_url: str):
        from testkit.live import LiveServer

        env = {
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(48),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "ANTHROPIC_API_KEY": "bench",
            "ANTHROPIC_BASE_URL": model_url,
            "HARNESS_BASH": "off",
            "HARNESS_RUNS_PER_MINUTE": "100000",
            "DATABASE_URL": options.database_url or f"sqlite:///{root / 'db.sqlite3'}",
            **({"REDIS_URL": options.redis_url} if options.redis_url else {}),
        }
        self.servers = []
        try:
            for i in range(options.processes):
                server = LiveServer(root, **env)
                server.log = root / f"daphne-{i}.log"
                self.servers.append(server.start())
        except Exception:
            self.stop()
            raise
        self.url = self.servers[0].url
        self.log = self.servers[0].log

    def fixture(self, call: str):
        code = f"import json\nfrom bench import fixtures\nprint(json.dumps(fixtures.{call}))"
        output = self.servers[0].manage("shell", "-c", code)
        sessions = json.loads(output.strip().splitlines()[-1])
        if isinstance(sessions, list):
            for i, session in enumerate(sessions):
                session["base"] = self.servers[i % len(self.servers)].url
        return sessions

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(s.process.pid) for s in self.servers)

    def rss_bytes(self) -> int:
        return sum(rss_bytes(s.process.pid) for s in self.servers)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


# -- phases ----------------------------------------------------------------------------------
async def idle_memory(cluster: Cluster, count: int) -> dict:
    warm = await latency.open_sessions(cluster.fixture("sessions(20, 'idle')"))
    await asyncio.gather(*(ws.close() for ws in warm))
    sessions = cluster.fixture(f"sessions({count}, 'idle')")
    await asyncio.sleep(1)
    before = cluster.rss_bytes()
    sockets = await latency.open_sessions(sessions)
    await asyncio.sleep(2)
    after = cluster.rss_bytes()
    await asyncio.gather(*(ws.close() for ws in sockets))
    return {
        "sessions": count,
        "rss_before_mb": round(before / 2**20, 1),
        "rss_after_mb": round(after / 2**20, 1),
        "per_session_kb": round((after - before) / count / 1024, 1),
    }


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def level(cluster: Cluster, model_url: str, sessions: int, options: Options) -> dict:
    sdk_cpu = own_cpu_seconds()
    baseline = await latency.sdk_streams(model_url, sessions, options.tokens, options.spread)
    sdk_cpu = own_cpu_seconds() - sdk_cpu
    sockets = await latency.open_sessions(cluster.fixture(f"sessions({sessions}, 'load')"))
    # Each user's sandbox is made on their first prompt (a cold start the burst measures):
    # one prompt each first, so the level measures streaming, not sandboxes starting.
    await latency.product_streams(sockets, options.tokens, options.spread)
    await asyncio.sleep(0.5)
    cpu_before = cluster.cpu_seconds()
    product = await latency.product_streams(sockets, options.tokens, options.spread)
    cpu = cluster.cpu_seconds() - cpu_before
    await asyncio.gather(*(ws.close() for ws in sockets))
    sdk, ours = baseline.summary(), product.summary()
    stream_seconds = options.tokens / options.rate
    return {
        "sessions": sessions,
        "sdk": sdk,
        "harness": ours,
        "p99_over_sdk_ms": _diff(ours["p99_ms"], sdk["p99_ms"]),
        "p99_ratio": _ratio(ours["p99_ms"], sdk["p99_ms"]),
        # The same, of the deltas stamped once every prompt of the level has started: what
        # streaming costs, without the starts' burst of work (bench/latency.py)
        "steady_p99_over_sdk_ms": _diff(ours["steady_p99_ms"], sdk["steady_p99_ms"]),
        "server_cpu_ms_per_1k_deltas": round(cpu * 1000 / max(1, product.delivered) * 1000, 1),
        "sdk_cpu_ms_per_1k_deltas": round(sdk_cpu * 1000 / max(1, baseline.delivered) * 1000, 1),
        "server_cpu_share": round(cpu / product.seconds, 2),
        "frames_per_session_second": round(product.frames / sessions / stream_seconds, 1),
    }


def _diff(a, b):
    return None if a is None or b is None else round(a - b, 1)


def _ratio(a, b):
    return None if not a or not b else round(a / b, 2)


async def warm_up(cluster: Cluster) -> None:
    """A prompt first: each server imports the SDK and fills its caches on first use (and
    so does this process, which reads the baseline streams)."""
    from agent.core.config import Config
    from agent.core.model.client import make_client

    await make_client(Config(api_key="bench", base_url=cluster.url)).close()
    warm = cluster.fixture(f"sessions({2 * len(cluster.servers)}, 'warm')")
    sockets = await latency.open_sessions(warm)
    await latency.product_streams(sockets, 1, 0.1)
    await asyncio.gather(*(ws.close() for ws in sockets))


def _percentiles(values: list[float]) -> dict:
    sample = latency.Sample(latencies_ms=values)
    return {"p50_ms": latency._round(sample.percentile(50)),
            "p99_ms": latency._round(sample.percentile(99)), "count": len(values)}  # fmt: skip


async def first_tokens(cluster: Cluster, model_url: str, options: Options) -> dict:
    """Enter → first visible token against the SDK's request → first token: on an idle
    server (prompts one after another on one session) and under a burst of prompts."""
    result = {}
    for name, count, at_once in (("idle", options.idle_prompts, False),
                                 ("burst", options.burst, True)):  # fmt: skip
        sdk = await latency.sdk_first_tokens(model_url, count, at_once)
        sessions = cluster.fixture(f"sessions({count if at_once else 1}, 'first-{name}')")
        sockets = await latency.open_sessions(sessions)
        await asyncio.sleep(0.5)
        ours = await latency.product_first_tokens(sockets if at_once else sockets * count,
                                                  at_once)  # fmt: skip
        await asyncio.gather(*(ws.close() for ws in sockets))
        result[name] = {"prompts": count, "sdk": _percentiles(sdk),
                        "harness": _percentiles(ours)}  # fmt: skip
    return result


async def measure(cluster: Cluster, model_url: str, options: Options) -> dict:
    await warm_up(cluster)
    result = {"idle_memory": await idle_memory(cluster, options.idle_sessions), "levels": []}
    result["first_token"] = await first_tokens(cluster, model_url, options)
    for sessions in options.levels:
        result["levels"].append(await level(cluster, model_url, sessions, options))
        print(_level_line(result["levels"][-1]), file=sys.stderr, flush=True)
    return result


def streaming(options: Options) -> tuple[dict, str]:
    """The model and the product under Daphne: latency, CPU, memory, render cost, pages;
    and the server's log."""
    root = Path(tempfile.mkdtemp(prefix="run-", dir=options.out))
    upstream = Upstream(options.tokens, options.rate)
    cluster = None
    try:
        cluster = Cluster(root, options, upstream.url)
        figures = asyncio.run(measure(cluster, upstream.url, options))
        short = cluster.fixture("long_conversation(9, 'bench-short')")
        long = cluster.fixture(f"long_conversation({options.long_events})")
        path = f"/c/{long['conversation']}/"
        figures["page"] = {
            "transfer": page.transfer(cluster.url, f"/c/{short['conversation']}/",
                                      short["session"]),
            "long_conversation": {"events": long["events"],
                                  **page.serve_time(cluster.url, path, long["session"])},
        }  # fmt: skip
    finally:
        if cluster is not None:
            cluster.stop()
        upstream.stop()
    unpaced = Upstream(options.render_tokens, 1e9)
    try:
        figures["render"] = render_cost.measure(unpaced.url, options.render_tokens)
    finally:
        unpaced.stop()
    return figures, str(cluster.log) if cluster else ""


def run(options: Options) -> dict:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    options.out.mkdir(parents=True, exist_ok=True)
    figures, log = {}, ""
    if options.only in (None, "streaming"):
        figures, log = streaming(options)
    if options.only in (None, "projects"):
        figures["projects"] = projects.measure(options.project_files, options.project_runs)
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(options),
              "options": {k: str(v) if isinstance(v, Path) else v
                          for k, v in asdict(options).items()},
              **figures}  # fmt: skip
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"bench-{stamp}.json", "latest.json"):
        (options.out / name).write_text(json.dumps(report, indent=2) + "\n")
    report["log"] = log
    return report


def machine(options: Options) -> dict:
    import anthropic
    import django

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "anthropic": anthropic.__version__,
        "database": "postgresql" if options.database_url else "sqlite",
        "channel_layer": "redis" if options.redis_url else "in-memory",
        "processes": options.processes,
    }


# -- the table -------------------------------------------------------------------------------
def _level_line(row: dict) -> str:
    sdk, ours = row["sdk"], row["harness"]
    return (
        f"{row['sessions']:>8} | {_ms(sdk['p50_ms'])} | {_ms(sdk['p99_ms'])} | "
        f"{_ms(ours['p50_ms'])} | {_ms(ours['p99_ms'])} | {_ms(row['p99_over_sdk_ms'])} | "
        f"{_ms(row['steady_p99_over_sdk_ms']):>11} | "
        f"{ours['delivered']:>7}/{ours['expected']:<7} | "
        f"{row['sdk_cpu_ms_per_1k_deltas']:>7.1f} | {row['server_cpu_ms_per_1k_deltas']:>9.1f} | "
        f"{row['frames_per_session_second']:>6}"
    )


def _ms(value) -> str:
    return f"{value:>8.1f}" if value is not None else "       -"


def table(report: dict) -> str:
    m = report["machine"]
    lines = [f"Harness benchmark, {report['when']}: {m['cpus']} CPUs, Python {m['python']}"]
    if "levels" in report:
        lines = streaming_lines(report)
    if "projects" in report:
        lines += ["", *projects.lines(report["projects"])]
    return "\n".join(lines)


def streaming_lines(report: dict) -> list[str]:
    m, render, idle = report["machine"], report["render"], report["idle_memory"]
    transfer, long = report["page"]["transfer"], report["page"]["long_conversation"]
    opts = report["options"]
    lines = [
        f"Harness benchmark, {report['when']}: {m['cpus']} CPUs, Python {m['python']}, "
        f"anthropic {m['anthropic']}, {m['processes']} Daphne process(es), {m['database']}, "
        f"{m['channel_layer']} channel layer",
        f"each session streams {opts['tokens']} deltas at {opts['rate']:g}/s; latency = "
        "arrival - stamp, in ms; CPU in ms per 1,000 deltas (SDK: the reading process alone; "
        "Hns: the server, all in); steady over: p99 over the SDK's of the deltas stamped once "
        "every prompt has started; fr/s/s: frames per second per session",
        "",
        "sessions |  SDK p50 |  SDK p99 |  Hns p50 |  Hns p99 | p99 over | steady over |"
        " delivered/expected | SDK CPU | Hns CPU   | fr/s/s",
    ]
    lines += [_level_line(row) for row in report["levels"]]
    for name, row in report.get("first_token", {}).items():
        sdk, ours = row["sdk"], row["harness"]
        how = "one after another" if name == "idle" else "sent at once"
        lines.append(
            f"first token, {row['prompts']} prompts {how}: SDK p50 {_ms(sdk['p50_ms']).strip()}"
            f" / p99 {_ms(sdk['p99_ms']).strip()} ms; Enter → first visible token p50 "
            f"{_ms(ours['p50_ms']).strip()} / p99 {_ms(ours['p99_ms']).strip()} ms"
        )
    lines += [
        "",
        f"memory per idle open session: {idle['per_session_kb']:.1f} KB "
        f"({idle['sessions']} sessions, RSS {idle['rss_before_mb']} -> {idle['rss_after_mb']} MB)",
        f"streaming a {render['tokens']:,}-token answer: first 1,000 tokens "
        f"{render['first_1k_pipeline_ms']} ms CPU, last 1,000 {render['last_1k_pipeline_ms']} ms "
        f"(x{render['ratio']}); frame rendering alone {render['first_1k_render_ms']} -> "
        f"{render['last_1k_render_ms']} ms (x{render['render_ratio']}); "
        f"markdown of the whole answer, once: {render['final_markdown_ms']} ms",
        f"chat page transfer: {transfer['total_bytes'] / 1024:.1f} KB in "
        f"{len(transfer['items'])} responses (gzip: "
        f"{sum(1 for i in transfer['items'] if i['encoding'] == 'gzip')} of them)",
        f"conversation of {long['events']:,} events served in {long['median_ms']} ms "
        f"(median of {long['repeats']}, max {long['max_ms']} ms, {long['bytes'] / 1024:.0f} KB "
        f"gzipped); its first load in a process, before any of it is rendered: "
        f"{long['first_ms']} ms",
    ]
    return lines
