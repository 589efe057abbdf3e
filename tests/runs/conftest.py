"""The model gateway's fixtures: the scripted upstream with the deployment's key, and one
CLI session's gateway."""

from __future__ import annotations

import pytest

from agent.runs import llm_gateway
from agent.runs.llm_gateway import open_gateway
from tests.runs.gateway_calls import DEPLOYMENT_KEY


@pytest.fixture
def upstream(model, settings):
    model.reset()
    settings.ANTHROPIC_API_KEY = DEPLOYMENT_KEY
    settings.ANTHROPIC_BASE_URL = model.url
    return model


@pytest.fixture
async def gateway(upstream):
    gateway = await open_gateway("c0ffee00-0000-4000-8000-000000000001", 7)
    yield gateway
    await gateway.close()
    await llm_gateway.close_upstream()
