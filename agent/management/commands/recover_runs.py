"""Mark conversations left running by a stopped server as interrupted (single process)."""

from django.core.management.base import BaseCommand

from agent.models import Conversation
from agent.recovery import interrupt


class Command(BaseCommand):
    help = "Mark every conversation still 'running' as interrupted. Run before the server starts."

    def handle(self, *args, **opts):
        count = interrupt(Conversation.objects.filter(state=Conversation.State.RUNNING))
        if count:
            self.stdout.write(f"Marked {count} interrupted conversation(s).")
