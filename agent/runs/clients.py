"""The model clients of a server process: one per event loop and credentials."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from agent.core.config import Config
from agent.core.model.client import make_client

# One SDK client per event loop: it holds an HTTP connection pool bound to that loop.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict] = weakref.WeakKeyDictionary()


def client_for(config: Config) -> Any:
    loop = asyncio.get_running_loop()
    per_loop = _clients.setdefault(loop, {})
    key = (config.api_key, config.base_url)
    if key not in per_loop:
        per_loop[key] = make_client(config)
    return per_loop[key]
