"""A browser on process A sees, live, a run started through process B, and cancels it
from A (PostgreSQL + Redis)."""

from __future__ import annotations

import pytest

from testkit.api_client import Api
from testkit.model_server import text_reply
from tests.e2e.conftest import sign_in, wait_idle
from tests.services import two_servers

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, model):
    with two_servers(tmp_path_factory.mktemp("browser-cluster"), model.url, "pia") as servers:
        a, b = servers
        yield a, Api(b.url, b.manage("create_api_token", "pia").strip())


def test_browser_on_a_sees_and_cancels_a_run_started_on_b(browser, cluster, fresh_model):
    a, on_b = cluster
    context = browser.new_context(base_url=a.url)
    try:
        page = sign_in(context, "pia")
        conversation = page.url.rstrip("/").rsplit("/", 1)[-1]
        fresh_model.enqueue(text_reply("From process B. " * 40, delay=0.02))
        assert on_b.call("POST", f"/api/conversations/{conversation}/prompt",
                         {"content": "started on B"})[0] == 202  # fmt: skip
        page.wait_for_selector("#live-text")  # streaming live into A's page
        page.wait_for_selector("[data-part=user]")
        wait_idle(page)
        assert "started on B" in page.locator("[data-part=user]").last.inner_text()
        assert page.locator("[data-part=text]").last.inner_text().startswith("From process B.")
        fresh_model.enqueue(text_reply("endless " * 2000, delay=0.02))
        on_b.call("POST", f"/api/conversations/{conversation}/prompt", {"content": "again"})
        page.wait_for_selector("#live-text")
        page.click("#cancel")  # the run is on B; the cancel goes through A
        page.wait_for_function("() => document.querySelector('#status').dataset.state === 'error'")
        assert "Cancelled" in page.inner_text("#status")
    finally:
        context.close()
