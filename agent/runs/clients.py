"""The model providers of a server process: one per event loop and credentials."""

from __future__ import annotations

import asyncio
import weakref

from agent.core.config import Config
from agent.core.model.client import make_provider
from agent.core.model.provider import Provider

# One per event loop: the SDK's client holds an HTTP connection pool bound to that loop.
_providers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict] = weakref.WeakKeyDictionary()


def provider_for(config: Config) -> Provider:
    loop = asyncio.get_running_loop()
    per_loop = _providers.setdefault(loop, {})
    key = (config.api_key, config.base_url)
    if key not in per_loop:
        per_loop[key] = make_provider(config)
    return per_loop[key]
