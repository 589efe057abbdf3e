"""Settings for the test suite: the development defaults, plus a fast password hasher."""

import os

os.environ.setdefault("DJANGO_DEBUG", "1")

from .settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not shared-cache memory: runs write from several threads, and only a file
    # database gives them WAL and the busy timeout (memory answers "table is locked").
    import tempfile

    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": f"{tempfile.gettempdir()}/harness-test-{os.getpid()}.sqlite3"
    }
