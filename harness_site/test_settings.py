"""Settings for the test suite: the development defaults, plus a fast password hasher."""

import os
import tempfile

os.environ.setdefault("DJANGO_DEBUG", "1")

from .settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Plain directories: the suite makes hundreds of users, and a loop mount each would outlive
# the run. Tests of workspace quotas opt in (settings fixture) and unmount what they mount.
HARNESS_WORKSPACE_STORAGE = "plain"
# Nothing collected: static files keep their plain URLs and come from the finders, looked
# up per request, as in development (the tests run without DEBUG). The live servers serve
# the collected ones (testkit/live.py); the tests of those collect their own
# (tests/deploy/test_staticfiles.py).
STATIC_ROOT = f"{tempfile.gettempdir()}/harness-test-static-{os.getpid()}"
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# Rate-limit counters live in the process's cache, which outlives each test's database (and
# user ids come back): high here; the tests of the limits set their own and clear the cache
# (tests/web/test_throttling.py).
HARNESS_CONVERSATIONS_PER_HOUR = 1_000_000
HARNESS_API_TOKEN_FAILURES = 1_000_000

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, not shared-cache memory: runs write from several threads, and only a file
    # database gives them WAL and the busy timeout (memory answers "table is locked").
    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": f"{tempfile.gettempdir()}/harness-test-{os.getpid()}.sqlite3"
    }
