"""/metrics: Prometheus's text format for the holder of HARNESS_METRICS_TOKEN, counting what
a live Daphne actually did (runs, a failed one, sockets, frames, event-log commits, CPU)."""

from __future__ import annotations

import asyncio
import http.client
import re
import time

import pytest
from websockets.asyncio.client import connect

from testkit.api_client import Api
from testkit.live import LiveServer
from testkit.model_server import error_event, message_start, text_block, text_reply
from tests.web.test_revocation_live import home_conversation, sign_in

TOKEN = "metrics-token-" + "0123456789" * 3


@pytest.fixture
def live(tmp_path, model):
    model.reset()
    server = LiveServer(tmp_path, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=model.url,
                        HARNESS_BASH="off", HARNESS_METRICS_TOKEN=TOKEN).start()  # fmt: skip
    server.create_users("mia")
    yield server
    server.stop()


def _get(server: LiveServer, token: str | None, host: str = "127.0.0.1"):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Host": host, **({"Authorization": f"Bearer {token}"} if token else {})}
    connection.request("GET", "/metrics", headers=headers)
    response = connection.getresponse()
    return response.status, response.getheader("Content-Type"), response.read().decode()


def _samples(server: LiveServer) -> dict[str, float]:
    status, content_type, text = _get(server, TOKEN)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return {name: float(value) for name, value in re.findall(r"^(\S+) (\S+)$", text, re.M)}


def _wait(server: LiveServer, name: str, value: float, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while (samples := _samples(server)).get(name) != value:
        assert time.monotonic() < deadline, (name, samples.get(name))
        time.sleep(0.1)
    return samples


def test_metrics_need_the_token_and_never_show_without_it(live):
    assert _get(live, None)[0] == 401
    assert _get(live, "wrong-" + TOKEN)[0] == 401
    status, _, body = _get(live, None, host="evil.example")
    assert status == 401 and "harness_" not in body
    samples = _samples(live)
    assert samples["harness_runs_started_total"] == 0
    assert samples["harness_websockets_open"] == 0
    assert samples["harness_event_loop_lag_seconds"] == 0  # nothing streams


async def test_metrics_count_runs_failures_sockets_frames_and_event_log_writes(live, model):
    session = await asyncio.to_thread(sign_in, live, "mia", "pw-mia-1234")
    conversation = await asyncio.to_thread(home_conversation, live, session)
    api = Api(live.url, (await asyncio.to_thread(live.manage, "create_api_token", "mia")).strip())
    model.enqueue(text_reply("all good here"),
                  # an overloaded API, mid-stream: the run ends in an error
                  type(text_reply(""))([message_start(), *text_block(0, "par")[:2],
                                        error_event()]))  # fmt: skip
    ws_url = f"{live.url.replace('http://', 'ws://')}/ws/c/{conversation}/"
    async with connect(ws_url, origin=live.url,
                       additional_headers={"Cookie": f"sessionid={session}"}):  # fmt: skip
        await asyncio.to_thread(_wait, live, "harness_websockets_open", 1)
        for expected_runs in (1, 2):
            status, _ = await asyncio.to_thread(
                api.call, "POST", f"/api/conversations/{conversation}/prompt", {"content": "hi"}
            )
            assert status == 202
            await asyncio.to_thread(_wait, live, "harness_runs_finished_total", expected_runs)
        samples = await asyncio.to_thread(_samples, live)
    assert samples["harness_runs_started_total"] == 2
    assert samples["harness_runs_failed_total"] == 1
    assert samples['harness_run_errors_total{code="overloaded"}'] == 1
    assert samples["harness_frames_sent_total"] >= 4  # each run's prompt, text and statuses
    assert samples["harness_event_log_write_seconds_count"] >= 4
    assert (
        samples['harness_event_log_write_seconds_bucket{le="+Inf"}']
        == (samples["harness_event_log_write_seconds_count"])
    )
    assert samples["process_cpu_seconds_total"] > 0
    assert samples["harness_event_loop_lag_seconds"] == 0  # back to 0 once the runs ended
    await asyncio.to_thread(_wait, live, "harness_websockets_open", 0)
