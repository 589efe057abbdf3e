"""Full-text search (docs/API.md) on SQLite's FTS5 and PostgreSQL's text search, kept
up to date as events are stored: the caller's own prompts and answers only, any query text
safe (the engines' syntax characters are words, never operators), a snippet per match."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer
from tests.services import fresh_pg_database
from tests.web.test_api import new_conversation, wait_state

HOSTILE = ['"', "*", "'", "AND OR NOT (", "NEAR(x y)", "col:term", "-x", "^", "a\\", "%_", "ü"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def live(request, tmp_path_factory, model):
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": model.url,
           "HARNESS_BASH": "off", "HARNESS_RUNS_PER_MINUTE": "100"}  # fmt: skip
    if request.param == "postgresql":
        with fresh_pg_database(migrated=True) as url:
            server = LiveServer(tmp_path_factory.mktemp("search-pg"), DATABASE_URL=url, **env)
            server.start()
            server.create_users("sara", "tom")
            yield server
            server.stop()
    else:
        server = LiveServer(tmp_path_factory.mktemp("search"), **env)
        server.start()
        server.create_users("sara", "tom")
        yield server
        server.stop()


def token(live, name: str) -> Api:
    return Api(live.url, live.manage("create_api_token", name).strip())


def ask(api: Api, cid: str, text: str) -> None:
    assert api.call("POST", f"/api/conversations/{cid}/prompt", {"content": text})[0] == 202
    wait_state(api, cid, "idle")


def test_prompts_and_answers_are_found_with_a_snippet_as_soon_as_stored(live, fresh):
    sara, tom = token(live, "sara"), token(live, "tom")
    cid = new_conversation(sara)
    ask(sara, cid, "deploy the zebrafish pipeline to staging tonight")
    status, body = sara.call("GET", "/api/search?q=zebrafish")
    assert status == 200, body
    seqs = {(r["conversation"], r["seq"]) for r in body["results"]}
    assert len(seqs) == 2 and all(c == cid for c, _ in seqs)  # the prompt and its echo
    assert all("zebrafish" in r["snippet"] for r in body["results"])
    assert sara.call("GET", "/api/search?q=ZEBRAFISH+staging")[1]["results"]  # all words
    assert sara.call("GET", "/api/search?q=zebrafish+giraffe")[1]["results"] == []
    assert tom.call("GET", "/api/search?q=zebrafish")[1]["results"] == []  # not tom's


def test_any_query_text_is_safe_and_bad_queries_are_400(live, fresh):
    sara = token(live, "sara")
    for query in HOSTILE:
        status, body = sara.call("GET", "/api/search?q=" + quote(query))
        assert status == 200 and isinstance(body["results"], list), (query, body)
    assert sara.call("GET", "/api/search?q=")[0] == 400
    assert sara.call("GET", "/api/search?q=" + "a" * 201)[0] == 400
    assert Api(live.url, None).call("GET", "/api/search?q=x")[0] == 401


def test_a_deleted_conversation_is_no_longer_found(live, fresh):
    sara = token(live, "sara")
    cid = new_conversation(sara)
    ask(sara, cid, "the quokka memo")
    assert sara.call("GET", "/api/search?q=quokka")[1]["results"]
    live.manage("shell", "-c", f"from agent.models import Conversation; "
                f"Conversation.objects.filter(id='{cid}').delete()")  # fmt: skip
    assert sara.call("GET", "/api/search?q=quokka")[1]["results"] == []
