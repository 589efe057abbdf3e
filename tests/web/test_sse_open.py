"""An event stream answers at once, even on a conversation with nothing to replay and a
heartbeat far away (Daphne sends the headers only with the first bytes of the body)."""

from __future__ import annotations

import time

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    server = LiveServer(tmp_path_factory.mktemp("sse"), HARNESS_SSE_HEARTBEAT="30")
    server.start()
    server.create_users("quinn")
    yield server
    server.stop()


def test_an_empty_conversations_stream_opens_before_the_first_heartbeat(live):
    api = Api(live.url, live.manage("create_api_token", "quinn").strip())
    status, created = api.call("POST", "/api/conversations", {})
    assert status == 201
    started = time.monotonic()
    response, stream = api.events(created["id"], timeout=10)
    assert response.status == 200 and time.monotonic() - started < 5
    assert next(stream) == ("comment", "connected")
