"""``python manage.py bench``: measure the streaming path, first load, memory, projects."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


def _levels(value: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise CommandError(f"--levels takes numbers separated by commas, not {value!r}") from exc
    if not levels or min(levels) < 1:
        raise CommandError("--levels needs at least one number of sessions, each 1 or more")
    return levels


class Command(BaseCommand):
    help = (
        "Start the stamped test model and the product under Daphne, measure delivery latency "
        "against the SDK alone, CPU, memory, render cost and first load; then projects' "
        "checkpoints, restores and clones; print a table and write JSON under var/bench/."
    )

    def add_arguments(self, parser):
        from bench.run import Options

        default = Options()  # one source for the defaults: the benchmark's own
        levels = ",".join(map(str, default.levels))
        parser.add_argument(
            "--levels",
            default=levels,
            type=_levels,
            help=f"concurrent sessions per level (default {levels})",
        )
        parser.add_argument(
            "--tokens",
            type=int,
            default=default.tokens,
            help=f"deltas per streamed answer (default {default.tokens})",
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=default.rate,
            help=f"deltas per second (default {default.rate:g})",
        )
        parser.add_argument("--idle-sessions", type=int, default=default.idle_sessions)
        parser.add_argument(
            "--idle-prompts",
            type=int,
            default=default.idle_prompts,
            help="prompts one after another for the idle first-token figure "
            f"(default {default.idle_prompts})",
        )
        parser.add_argument(
            "--burst",
            type=int,
            default=default.burst,
            help=f"prompts sent at once for the first-token figure under a burst "
            f"(default {default.burst})",
        )
        parser.add_argument(
            "--long-events",
            type=int,
            default=default.long_events,
            help="events in the long conversation whose page is timed",
        )
        parser.add_argument("--render-tokens", type=int, default=default.render_tokens)
        parser.add_argument("--database-url", help="e.g. postgres://… (default: a new SQLite)")
        parser.add_argument("--redis-url", help="use the Redis layer (default: in-memory)")
        parser.add_argument(
            "--processes",
            type=int,
            default=default.processes,
            help="Daphne processes sharing the load (more than 1 needs --redis-url; give them "
            "PostgreSQL too: on one SQLite file, run starts queue for its write lock)",
        )
        parser.add_argument(
            "--out",
            type=Path,
            default=default.out,
            help=f"directory for the JSON (default {default.out})",
        )
        parser.add_argument(
            "--only",
            choices=["projects", "streaming"],
            help="run one section alone: projects (checkpoint, restore, clone; no server) or "
            "streaming (the server: latency, first token, memory, pages)",
        )
        parser.add_argument(
            "--project-files",
            type=int,
            default=default.project_files,
            help=f"files in the projects section's worktree (default {default.project_files})",
        )
        parser.add_argument(
            "--project-runs",
            type=int,
            default=default.project_runs,
            help="checkpoints after a one-file change, per path measured "
            f"(default {default.project_runs})",
        )
        parser.add_argument("--json", action="store_true", help="print the JSON, not the table")

    def handle(self, *args, **options):
        from bench.run import Options, run, table

        if options["tokens"] < 1 or options["rate"] <= 0 or options["render_tokens"] < 2000:
            raise CommandError("--tokens and --rate must be positive, --render-tokens >= 2000")
        if options["idle_prompts"] < 1 or options["burst"] < 1:
            raise CommandError("--idle-prompts and --burst must be 1 or more")
        if options["project_files"] < 1 or options["project_runs"] < 1:
            raise CommandError("--project-files and --project-runs must be 1 or more")
        if options["processes"] < 1:
            raise CommandError("--processes must be 1 or more")
        if options["processes"] > 1 and not options["redis_url"]:
            raise CommandError("--processes above 1 needs --redis-url (they share the layer)")
        chosen = Options(
            processes=options["processes"],
            levels=options["levels"],
            tokens=options["tokens"],
            rate=options["rate"],
            idle_sessions=options["idle_sessions"],
            idle_prompts=options["idle_prompts"],
            burst=options["burst"],
            long_events=options["long_events"],
            render_tokens=options["render_tokens"],
            database_url=options["database_url"],
            redis_url=options["redis_url"],
            out=options["out"],
            only=options["only"],
            project_files=options["project_files"],
            project_runs=options["project_runs"],
        )
        report = run(chosen)
        self.stdout.write(json.dumps(report, indent=2) if options["json"] else table(report))
        self.stdout.write(f"\nJSON: {chosen.out / 'latest.json'}")
