"""Create an API token for a user and print it (it is not stored and not shown again)."""

from django.core.management.base import BaseCommand, CommandError

from agent.models import User
from agent.web.api_tokens import create_token


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, *args, **opts):
        user = User.objects.filter(username=opts["username"]).first()
        if user is None:
            raise CommandError(f"no user named {opts['username']!r}", returncode=2)
        if not user.is_active:
            raise CommandError(f"user {opts['username']!r} is not active", returncode=2)
        _, token = create_token(user, opts["name"])
        self.stdout.write(token)
