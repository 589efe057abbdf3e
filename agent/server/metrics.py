"""This process's metrics, in Prometheus's text format.

Each Daphne process keeps its own (they are scraped one port each, as ``/healthz`` is
probed), so there is nothing to share and no dependency: counters, gauges and one
histogram, updated from the event loop (and, for CPU, read from the kernel at scrape).
Only cheap operations on the hot path: nothing per streamed delta.
"""

from __future__ import annotations

import os
from collections import defaultdict


def _labels(name: str | None, value: str | None) -> str:
    if name is None:
        return ""
    escaped = str(value).replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return f'{{{name}="{escaped}"}}'


class Counter:
    kind = "counter"

    def __init__(self, name: str, help_text: str, label: str | None = None):
        self.name, self.help, self.label = name, help_text, label
        self.values: dict[str | None, float] = defaultdict(float)
        if label is None:
            self.values[None] = 0.0  # shown as 0 before the first event

    def inc(self, amount: float = 1.0, label: str | None = None) -> None:
        self.values[label] += amount

    def samples(self) -> list[str]:
        return [
            f"{self.name}{_labels(self.label, key)} {value:g}"
            for key, value in sorted(self.values.items(), key=lambda kv: str(kv[0]))
        ]


class Gauge(Counter):
    kind = "gauge"

    def dec(self, amount: float = 1.0) -> None:
        self.values[None] -= amount

    def set(self, value: float) -> None:
        self.values[None] = value


class Histogram:
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]):
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * len(buckets)
        self.count, self.sum = 0, 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def samples(self) -> list[str]:
        lines = [
            f'{self.name}_bucket{{le="{bound:g}"}} {n}'
            for bound, n in zip(self.buckets, self.counts, strict=True)
        ]
        lines.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
        lines.append(f"{self.name}_sum {self.sum:g}")
        lines.append(f"{self.name}_count {self.count}")
        return lines


RUNS_STARTED = Counter("harness_runs_started_total", "Runs (prompts) started by this process.")
RUNS_FINISHED = Counter("harness_runs_finished_total", "Runs that ended, failed ones included.")
RUNS_FAILED = Counter(
    "harness_runs_failed_total", "Runs that ended in an error (the API's, storage, a crash)."
)
RUN_ERRORS = Counter(
    "harness_run_errors_total",
    "Error events of runs by code: the API's (rate_limited, overloaded, api_error, timeout, "
    "connection_error, stream_error, http_NNN, ...) and the loop's own (max_turns, ...).",
    label="code",
)
SOCKETS = Gauge("harness_websockets_open", "Page WebSockets open in this process.")
FRAMES = Counter("harness_frames_sent_total", "Live frames sent to page WebSockets.")
CONNECTIONS_REFUSED = Counter(
    "harness_connections_refused_total",
    "Page WebSockets and API event streams refused because their user held "
    "HARNESS_SOCKETS_PER_USER already, by kind (websocket, event_stream).",
    label="kind",
)
EVENT_LOG_WRITES = Histogram(
    "harness_event_log_write_seconds",
    "Time of one group commit of the event log (all runs' pending batches together).",
    (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
LOOP_LAG = Gauge(
    "harness_event_loop_lag_seconds",
    "The event loop's smoothed lag while any run streams (0 when none does): the interval "
    "between frames of text grows with it (agent/runs/pacing.py).",
)
EGRESS_CONNECTIONS = Counter(
    "harness_egress_connections_total",
    "Connections sandboxes asked the egress proxy for, and git operations (clone, push) "
    "through the git relay, by outcome (allowed, refused).",
    label="outcome",
)
EGRESS_BYTES = Counter(
    "harness_egress_bytes_total",
    "Bytes moved through the egress proxy and the git relay, by direction (up: from "
    "sandboxes, down: to them).",
    label="direction",
)
METRICS = (RUNS_STARTED, RUNS_FINISHED, RUNS_FAILED, RUN_ERRORS, SOCKETS, FRAMES,
           CONNECTIONS_REFUSED, EVENT_LOG_WRITES, LOOP_LAG, EGRESS_CONNECTIONS,
           EGRESS_BYTES)  # fmt: skip


def render() -> str:
    """Every metric, then the process's CPU time (user + system) from the kernel."""
    cpu = os.times()
    lines = []
    for metric in METRICS:
        lines += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.kind}"]
        lines += metric.samples()
    lines += [
        "# HELP process_cpu_seconds_total CPU time of this process (user and system).",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {cpu.user + cpu.system:g}",
    ]
    return "\n".join(lines) + "\n"
