"""The model providers of a server process: one per event loop and credentials, and the
loop's model reader process (``HARNESS_MODEL_READER``: agent/core/model/remote.py)."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from django.conf import settings

from agent.core.config import Config
from agent.core.model.client import make_provider
from agent.core.model.provider import Provider
from agent.core.model.remote import ModelReader, RemoteProvider


@dataclass
class _LoopProviders:
    reader: ModelReader = field(default_factory=ModelReader)
    providers: dict[tuple[str | None, str | None], Provider] = field(default_factory=dict)


# One per event loop: the SDK's client holds an HTTP connection pool bound to that loop,
# and the reader's pipe is the loop's.
_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopProviders] = (
    weakref.WeakKeyDictionary()
)


def _here() -> _LoopProviders:
    return _loops.setdefault(asyncio.get_running_loop(), _LoopProviders())


def _in_reader(config: Config) -> bool:
    return not config.offline and settings.HARNESS_MODEL_READER == "process"


def provider_for(config: Config) -> Provider:
    here = _here()
    key = (config.api_key, config.base_url)
    if key not in here.providers:
        here.providers[key] = (
            RemoteProvider(here.reader, config.api_key, config.base_url)
            if _in_reader(config)
            else make_provider(config)
        )
    return here.providers[key]


def warm(config: Config) -> None:
    """Starts the loop's model reader now, if its answers will need it, so that the first
    prompt does not wait for it to start."""
    if _in_reader(config):
        _here().reader.start()
