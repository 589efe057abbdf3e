"""The static files' storage: WhiteNoise's (Django's manifest storage, plus a gzipped copy
of each file), filled by ``collectstatic`` and served by ``WhiteNoiseMiddleware``.

Without DEBUG, each ``{% static %}`` URL names the file's content hash
(``harness.3f1c….js``), so it may be cached for good (WhiteNoise marks it ``immutable``)
and a new deploy changes the URL. Under DEBUG, Django gives the plain names and WhiteNoise
finds them through the finders, so an edited file is served as it is now (Django's
documented development setup). A file not collected (``collectstatic`` never ran: the unit
tests) keeps its plain URL instead of failing the page; a deployment that skipped
``collectstatic`` is logged.

The project's own scripts and stylesheets (``static/``, not the vendored ``*.min.*``) are
minified in the collected copy before they are hashed and gzipped: the repository keeps
them readable (comments included), the wire gets them about half as large
(docs/PERFORMANCE.md). Scripts go through tdewolff/minify, which shortens their local
names too (a fifth off what stripping space and comments leaves); a browser test of the
page as deployed runs the minified copies (tests/e2e/test_as_deployed.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import minify
import rcssmin
from django.conf import settings
from django.contrib.staticfiles.storage import StaticFilesStorage
from django.core.files.base import ContentFile
from whitenoise.storage import CompressedManifestStaticFilesStorage

log = logging.getLogger(__name__)
_warned: list[str] = []  # once per process: every page names its assets

MINIFIERS = {
    ".js": lambda text: minify.string("application/javascript", text),
    ".css": rcssmin.cssmin,  # (tdewolff's leaves rules nested in @container unminified)
}


def minified(name: str, text: str) -> str | None:
    """``text`` minified when ``name`` is one of ours to minify, else None."""
    path = Path(name)
    if ".min." in path.name or path.suffix not in MINIFIERS:
        return None
    return MINIFIERS[path.suffix](text)


class StaticStorage(CompressedManifestStaticFilesStorage):
    def url(self, name, force=False):
        try:
            return super().url(name, force)
        except ValueError:  # not in the manifest
            if not settings.DEBUG and not _warned:
                _warned.append(name)
                log.warning("static file %s is not collected: run manage.py collectstatic", name)
            return StaticFilesStorage.url(self, name)

    def post_process(self, paths, dry_run=False, **options):
        if not dry_run:
            paths = self._minify(paths)
        yield from super().post_process(paths, dry_run, **options)

    def _minify(self, paths: dict) -> dict:
        """Rewrites the collected copy of each of our files minified, and points the
        manifest's hashing (which reads the source of each file) at that copy."""
        ours = {str(Path(d).resolve()) for d in settings.STATICFILES_DIRS}
        paths = dict(paths)
        for name, (source, path) in paths.items():
            if str(Path(source.location).resolve()) not in ours:
                continue  # an app's (the admin's): shipped as its authors made it
            with source.open(path) as original:
                text = minified(name, original.read().decode())
            if text is None:
                continue
            self.delete(name)
            self.save(name, ContentFile(text.encode()))
            paths[name] = (self, name)
        return paths
