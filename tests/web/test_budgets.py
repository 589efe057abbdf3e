"""Monthly budgets and usage (docs/API.md) through the real SDK path: spend is added up
per user and day as usage events are stored; a prompt past the budget is refused with 429
``budget_exceeded`` and nothing runs; the admin's per-user budget overrides the default."""

from __future__ import annotations

import datetime

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer
from tests.web.test_api import new_conversation, wait_state


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("budgets"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_MONTHLY_BUDGET_USD="0.0001",
                        HARNESS_RUNS_PER_MINUTE="100")  # fmt: skip
    server.start()
    server.create_users("penny", "rich")
    yield server
    server.stop()


def token(live, name: str) -> Api:
    return Api(live.url, live.manage("create_api_token", name).strip())


def test_a_prompt_past_the_monthly_budget_is_refused_and_nothing_runs(live, fresh):
    penny = token(live, "penny")
    cid = new_conversation(penny)
    assert penny.call("POST", f"/api/conversations/{cid}/prompt", {"content": "one"})[0] == 202
    wait_state(penny, cid, "idle")  # an echo: 10 tokens in, 20 out, $0.00011
    asked = len(fresh.requests)
    status, body = penny.call("POST", f"/api/conversations/{cid}/prompt", {"content": "two"})
    assert status == 429 and body["error"] == "budget_exceeded", body
    assert "$0.00" in body["message"] and "renews" in body["message"]
    assert len(fresh.requests) == asked  # nothing ran
    usage = penny.call("GET", "/api/usage")[1]
    assert usage["budget_usd"] == 0.0001 and usage["month_to_date_usd"] == pytest.approx(0.00011)
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    assert usage["days"] == [{"date": today, "cost_usd": pytest.approx(0.00011),
                              "input_tokens": 10, "output_tokens": 20}]  # fmt: skip


def test_the_admins_budget_for_a_user_overrides_the_default(live, fresh):
    rich = token(live, "rich")
    cid = new_conversation(rich)
    rich.call("POST", f"/api/conversations/{cid}/prompt", {"content": "one"})
    wait_state(rich, cid, "idle")
    assert rich.call("POST", f"/api/conversations/{cid}/prompt", {"content": "two"})[0] == 429
    live.manage("shell", "-c", "from agent.models import User; "
                "User.objects.filter(username='rich').update(monthly_budget_usd=50)")  # fmt: skip
    assert rich.call("POST", f"/api/conversations/{cid}/prompt", {"content": "two"})[0] == 202
    wait_state(rich, cid, "idle")
    usage = rich.call("GET", "/api/usage")[1]
    assert usage["budget_usd"] == 50 and usage["month_to_date_usd"] == pytest.approx(0.00022)


def test_usage_needs_a_token(live):
    assert Api(live.url, None).call("GET", "/api/usage")[0] == 401
    assert token(live, "penny").call("POST", "/api/usage")[0] == 405
