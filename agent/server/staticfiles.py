"""The static files' storage: WhiteNoise's (Django's manifest storage, plus a gzipped copy
of each file), filled by ``collectstatic`` and served by ``WhiteNoiseMiddleware``.

Each ``{% static %}`` URL names the file's content hash (``harness.3f1c….js``), so it may
be cached for good (WhiteNoise marks it ``immutable``) and a new deploy changes the URL.
Django gives hashed URLs only without DEBUG; here they are given whenever the file was
collected, so a development server (``make run``, the tests' live servers) serves what a
production one does. A file not collected (a checkout where ``collectstatic`` never ran,
the unit tests) keeps its plain URL: under DEBUG WhiteNoise finds it through the finders,
as Django's documentation has it for development; without DEBUG it is a deployment that
skipped ``collectstatic``, and the page still renders (its assets 404, and it is logged).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage

log = logging.getLogger(__name__)
_warned: list[str] = []  # once per process: every page names its assets


class StaticStorage(CompressedManifestStaticFilesStorage):
    def url(self, name, force=False):
        try:
            return super().url(name, force=True)
        except ValueError:  # not in the manifest
            if not settings.DEBUG and not _warned:
                _warned.append(name)
                log.warning("static file %s is not collected: run manage.py collectstatic", name)
            return StaticFilesStorage.url(self, name)
