"""Mark conversations whose run's process is gone as interrupted."""

from django.core.management.base import BaseCommand

from agent.models import Conversation
from agent.runs.recovery import expired, interrupt


class Command(BaseCommand):
    help = (
        "Mark runs whose lease has expired as interrupted. With --all (single-process "
        "servers, at start-up), every conversation still 'running'."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--all",
            action="store_true",
            help="no server is running: every running conversation is stale",
        )

    def handle(self, *args, **opts):
        if opts["all"]:
            running = Conversation.objects.filter(state=Conversation.State.RUNNING)
            done = interrupt(running, only_expired=False)
        else:
            done = interrupt(expired())
        if done:
            self.stdout.write(f"Marked {len(done)} interrupted conversation(s).")
