"""Create the first superuser when there is none, printing its password once."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create a first superuser (username 'admin' by default) if no superuser exists."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, **opts):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=opts["username"], password=password)
        line = "=" * 60
        self.stdout.write(
            f"{line}\nCreated the first superuser. Sign in with:\n"
            f"  username: {opts['username']}\n  password: {password}\n"
            f"This password is shown only once; change it in /admin/.\n{line}"
        )
