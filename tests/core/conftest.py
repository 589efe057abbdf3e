"""The core's fixtures: the product's provider on the test model server."""

from __future__ import annotations

import pytest

from agent.core.model.anthropic import AnthropicProvider


@pytest.fixture
def provider(sdk_client):
    return AnthropicProvider(sdk_client)
