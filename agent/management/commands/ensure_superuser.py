"""Create the first superuser when there is none.

Its generated password never goes to a log: on a terminal it is printed once; otherwise
(systemd, Docker, CI, a redirected `make run`, whose output ends up in a journal or a log
file) it is written to a file only the server's account can read, and only that file's
path is printed.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


def default_password_file() -> Path:
    return Path(settings.VAR_DIR) / "initial-superuser-password"


def write_private(path: Path, text: str) -> None:
    """``text`` in ``path``, mode 0600 from its creation, replacing any older file whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


class Command(BaseCommand):
    help = (
        "Create a first superuser (username 'admin' by default) if no superuser exists. Its "
        "password is printed on a terminal, else written to a 0600 file (--password-file)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--password-file",
            type=Path,
            help="where the password goes when output is not a terminal "
            "(default: var/initial-superuser-password)",
        )

    def handle(self, *args, **opts):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        username = opts["username"]
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, password=password)
        line = "=" * 60
        if self.stdout.isatty():
            self.stdout.write(
                f"{line}\nCreated the first superuser. Sign in with:\n"
                f"  username: {username}\n  password: {password}\n"
                f"This password is shown only once; change it in /admin/.\n{line}"
            )
            return
        path = opts["password_file"] or default_password_file()
        write_private(path, f"username: {username}\npassword: {password}\n")
        self.stdout.write(
            f"Created the first superuser '{username}'. Output is not a terminal, so its "
            f"password is not shown: it is in {path} (mode 0600). Sign in, change it in "
            "/admin/, then delete that file."
        )
