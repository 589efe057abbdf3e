"""Attached images as a context transform: the history holds references (never the bytes);
each request gets their data, loaded once per loop by sha256 (``images.Loader``)."""

from __future__ import annotations

import logging
from typing import Any

from agent.core import images as images_mod

log = logging.getLogger(__name__)


class ImageStore:
    def __init__(self, loader: images_mod.Loader | None = None):
        self.loader = loader
        self.data: dict[str, str] = {}

    async def expand(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The request's messages with their images' data; those the loader no longer
        has (or no loader: the command line) are left out, and the request says so."""
        shas = images_mod.references(messages)
        if not shas:
            return messages
        missing = [sha for sha in shas if sha not in self.data]
        if missing and self.loader is not None:
            try:
                self.data.update(await self.loader(missing))
            except Exception:  # a failed load must not end the run: they are named instead
                log.exception("loading attached images failed")
        return images_mod.expand(messages, self.data)
