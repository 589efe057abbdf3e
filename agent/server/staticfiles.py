"""The static files' storage: WhiteNoise's (Django's manifest storage, plus a gzipped copy
of each file), filled by ``collectstatic`` and served by ``WhiteNoiseMiddleware``.

Without DEBUG, each ``{% static %}`` URL names the file's content hash
(``harness.3f1c….js``), so it may be cached for good (WhiteNoise marks it ``immutable``)
and a new deploy changes the URL. Under DEBUG, Django gives the plain names and WhiteNoise
finds them through the finders, so an edited file is served as it is now (Django's
documented development setup). A file not collected (``collectstatic`` never ran: the unit
tests) keeps its plain URL instead of failing the page; a deployment that skipped
``collectstatic`` is logged.
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
            return super().url(name, force)
        except ValueError:  # not in the manifest
            if not settings.DEBUG and not _warned:
                _warned.append(name)
                log.warning("static file %s is not collected: run manage.py collectstatic", name)
            return StaticFilesStorage.url(self, name)
