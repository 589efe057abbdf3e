"""The settings of the test suite's live servers (testkit/live.py): the product's own, with
a fast password hasher, as Django's documentation advises for tests. PBKDF2's iterations
cost a third of a second of CPU per sign-in and per user made, by design; the tests sign in
and make users by the hundred, and none of them is about the hasher's strength. The
benchmark's servers keep the product's settings."""

from harness_site.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
