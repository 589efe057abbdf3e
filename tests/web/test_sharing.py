"""Sharing and live collaboration (docs/API.md), against a live Daphne server with the
test model server behind the real SDK: the owner's members API, the ownership matrix of
every API endpoint, event stream and socket action for owner / collaborator / viewer /
team member / stranger / anonymous, a collaborator's run (the owner's workspace, the
owner's budget, ``author`` on its events), and a member revoked while their stream and
socket are open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from testkit.api_client import Api, read_until
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.services import fresh_pg_database, require_redis
from tests.web.test_api import is_final, new_conversation, wait_state
from tests.web.test_revocation_live import sign_in

pytestmark = pytest.mark.services  # PostgreSQL and Redis

CLOSE_WITHIN = 5.0
ROLES = ("owner", "collaborator", "viewer", "team", "stranger", "anonymous")
NAMES = {"owner": "olga", "collaborator": "cole", "viewer": "vera", "team": "tess",
         "stranger": "stan"}  # fmt: skip


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    # PostgreSQL (the pages' matrix, test_sharing_pages, runs on SQLite): the access
    # helper's subqueries under the snapshot's row lock, and search over shared ones.
    # Redis, in a database of its own: the owner's deactivation comes from another process
    # (a management shell), and other servers' groups must not hear these revocations.
    # Heartbeats a minute apart: what ends a revoked stream is the message, not a re-check.
    redis_url = re.sub(r"/\d*$", "", require_redis().rstrip("/")) + "/12"
    # The database is this module's own: counters a run before left there (the hourly
    # conversation limit counts by user id, and a fresh PostgreSQL reuses the ids) go.
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    with fresh_pg_database(migrated=True) as database_url:
        server = LiveServer(tmp_path_factory.mktemp("sharing"), ANTHROPIC_API_KEY="test-key",
                            DATABASE_URL=database_url, REDIS_URL=redis_url,
                            ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                            HARNESS_SSE_HEARTBEAT="60", HARNESS_RUNS_PER_MINUTE="200",
                            HARNESS_CONVERSATIONS_PER_HOUR="1000",
                            HARNESS_CONCURRENT_RUNS="5",
                            # the anonymous row of the matrix is one bad token per endpoint
                            HARNESS_API_TOKEN_FAILURES="200")  # fmt: skip
        server.start()
        try:
            server.create_users(*NAMES.values())
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def apis(live) -> dict[str, Api]:
    found = {role: Api(live.url, live.manage("create_api_token", name).strip())
             for role, name in NAMES.items()}  # fmt: skip
    found["anonymous"] = Api(live.url, None)
    return found


def shared_conversation(apis, *, team: bool = True) -> str:
    """olga's conversation: cole collaborates, vera views, and (``team``) tess reads it as
    one of the team."""
    owner = apis["owner"]
    cid = new_conversation(owner)
    base = f"/api/conversations/{cid}"
    assert owner.call("PUT", f"{base}/members/cole", {"role": "collaborator"}) == (
        200, {"username": "cole", "role": "collaborator"})  # fmt: skip
    assert owner.call("PUT", f"{base}/members/vera", {"role": "viewer"})[0] == 200
    if team:
        assert owner.call("PATCH", base, {"team": True})[1]["team"] is True
    return cid


# -- the members API ------------------------------------------------------------------------
def test_the_owner_grants_changes_and_removes_roles(apis):
    owner, cole = apis["owner"], apis["collaborator"]
    cid = new_conversation(owner)
    base = f"/api/conversations/{cid}"
    assert owner.call("PUT", f"{base}/members/cole", {"role": "viewer"})[0] == 200
    listed = {c["id"]: c for c in cole.call("GET", "/api/conversations")[1]["conversations"]}
    assert listed[cid]["role"] == "viewer"
    assert owner.call("PUT", f"{base}/members/Cole", {"role": "collaborator"}) == (
        200, {"username": "cole", "role": "collaborator"})  # fmt: skip
    assert owner.call("GET", f"{base}/members")[1] == {
        "members": [{"username": "cole", "role": "collaborator"}], "team": False}  # fmt: skip
    listed = {c["id"]: c for c in cole.call("GET", "/api/conversations")[1]["conversations"]}
    assert listed[cid]["role"] == "collaborator"
    assert owner.call("DELETE", f"{base}/members/cole") == (204, "")
    assert cid not in {c["id"] for c in cole.call("GET", "/api/conversations")[1]["conversations"]}
    assert cole.call("GET", base)[0] == 404
    assert owner.call("DELETE", f"{base}/members/cole")[0] == 404  # no longer a member


@pytest.mark.parametrize(("username", "body", "code"), [
    ("nobody-here", {"role": "viewer"}, "unknown_user"),
    ("olga", {"role": "viewer"}, "self_share"),
    ("cole", {"role": "admin"}, "bad_role"),
    ("cole", {}, "bad_role"),
    ("x" * 151, {"role": "viewer"}, "unknown_user"),
])  # fmt: skip
def test_bad_shares_are_refused_and_nothing_is_stored(apis, username, body, code):
    owner = apis["owner"]
    cid = new_conversation(owner)
    status, payload = owner.call("PUT", f"/api/conversations/{cid}/members/{username}", body)
    assert status == 400 and payload["error"] == code and payload["message"], payload
    assert owner.call("GET", f"/api/conversations/{cid}/members")[1]["members"] == []


def test_team_must_be_a_boolean_and_a_bad_patch_changes_nothing(apis):
    owner = apis["owner"]
    cid = new_conversation(owner)
    status, payload = owner.call("PATCH", f"/api/conversations/{cid}",
                                 {"title": "kept out", "team": "yes"})  # fmt: skip
    assert status == 400 and payload["error"] == "bad_request"
    assert owner.call("GET", f"/api/conversations/{cid}")[1]["title"] == ""
    assert apis["team"].call("GET", f"/api/conversations/{cid}")[0] == 404


def test_the_list_has_own_and_shared_conversations_each_with_its_role(apis):
    cid = shared_conversation(apis)
    for role in ("owner", "collaborator", "viewer"):
        listed = apis[role].call("GET", "/api/conversations")[1]["conversations"]
        assert {c["id"]: c["role"] for c in listed}[cid] == role
    team = {c["id"]: c["role"] for c in apis["team"].call("GET", "/api/conversations")[1][
        "conversations"]}  # fmt: skip
    assert team[cid] == "viewer"
    stranger = apis["stranger"].call("GET", "/api/conversations")[1]["conversations"]
    assert cid in {c["id"] for c in stranger}  # the team's: every active user reads it
    private = shared_conversation(apis, team=False)
    stranger = apis["stranger"].call("GET", "/api/conversations")[1]["conversations"]
    assert private not in {c["id"] for c in stranger}


# -- the ownership matrix: every API endpoint -------------------------------------------------
READS, DRIVES, OWNS = (
    {"owner", "collaborator", "viewer", "team"},
    {"owner", "collaborator"},
    {"owner"},
)


def api_endpoints(cid: str) -> list[tuple[str, str, object, set[str]]]:
    """(method, path, body, the roles allowed) for every conversation endpoint of the API."""
    base = f"/api/conversations/{cid}"
    return [
        ("GET", base, None, READS),
        ("PATCH", base, {"title": "renamed"}, OWNS),
        ("POST", f"{base}/prompt", {"content": "hello"}, DRIVES),
        ("POST", f"{base}/cancel", None, DRIVES),
        ("POST", f"{base}/compact", None, DRIVES),
        ("DELETE", f"{base}/queue/abc123", None, DRIVES),
        ("POST", f"{base}/approvals/toolu_x", {"decision": "approve"}, DRIVES),
        ("GET", f"{base}/members", None, OWNS),
        ("PUT", f"{base}/members/stan", {"role": "viewer"}, OWNS),
        ("DELETE", f"{base}/members/stan", None, OWNS),
        ("POST", f"{base}/regenerate", {}, DRIVES),
        ("GET", f"{base}/branches", None, READS),
        ("POST", f"{base}/branches/0/activate", None, DRIVES),
        ("POST", f"{base}/fork", {}, READS),  # a copy of the reader's own (§11)
        # A project conversation's (§15): here 400 not_in_project once access is granted.
        ("GET", f"{base}/checkpoints", None, READS),
        ("POST", f"{base}/restore", {"checkpoint": "0" * 40}, DRIVES),
        ("GET", f"{base}/changes", None, READS),  # a viewer of the page sees the diff
        ("POST", f"{base}/commit", {"message": "m"}, DRIVES),
        ("GET", f"{base}/archive", None, DRIVES),
        ("POST", f"{base}/push", None, DRIVES),  # here 409 no_project once access is granted
        ("GET", f"{base}/ports", None, READS),  # what listens in its terminal's sandbox
    ]


def outcome(status: int, payload) -> str:
    """What an answer means for access: refused as anonymous, as not found, as forbidden,
    or let through (whatever the endpoint then said: 200, 202, 409, an unknown queue id)."""
    if status == 401:
        return "unauthorized"
    if (
        status == 404
        and isinstance(payload, dict)
        and payload.get("message") == ("No such conversation.")
    ):
        return "not_found"
    if status == 403:
        assert payload["error"] == "forbidden", payload
        return "forbidden"
    return "allowed"


def expected(role: str, allowed: set[str]) -> str:
    if role == "anonymous":
        return "unauthorized"
    if role in allowed:
        return "allowed"
    return "forbidden" if role in READS else "not_found"


@pytest.mark.parametrize("role", ROLES)
def test_ownership_matrix_of_every_api_endpoint(apis, fresh, role):
    # (with the team on, everyone signed in reads it: the stranger's is a private one)
    cid = shared_conversation(apis, team=role != "stranger")
    api = apis[role]
    for method, path, body, allowed in api_endpoints(cid):
        status, payload = api.call(method, path, body)
        assert outcome(status, payload) == expected(role, allowed), (method, path, status, payload)
        if path.endswith("/prompt") and status == 202:
            wait_state(apis["owner"], cid, "idle")
    # The event stream (READ): a reader gets it, the others are refused before it opens.
    response, stream = api.events(cid, timeout=5)
    answer = {200: "allowed", 401: "unauthorized", 404: "not_found"}[response.status]
    assert answer == expected(role, READS)
    response.close()


def test_every_url_of_the_site_is_in_the_matrix():
    """A new URL must be added to the matrices here or in test_sharing_pages."""
    from harness_site.urls import urlpatterns
    from tests.web.test_sharing_pages import PAGE_MATRIX, USER_SCOPED

    api_paths = {p.split("conversations/{cid}")[-1] for _, p, _, _ in api_endpoints("{cid}")}
    covered = {
        "api_conversation": "" in api_paths, "api_prompt": "/prompt" in api_paths,
        "api_cancel": "/cancel" in api_paths, "api_compact": "/compact" in api_paths,
        "api_unqueue": True, "api_approval": True, "api_members": "/members" in api_paths,
        "api_member": True, "api_events": True,  # the stream, in the matrix test above
        "api_regenerate": "/regenerate" in api_paths, "api_branches": "/branches" in api_paths,
        "api_activate_branch": "/branches/0/activate" in api_paths,
        "api_fork": "/fork" in api_paths,
        "api_checkpoints": "/checkpoints" in api_paths, "api_restore": "/restore" in api_paths,
        "api_changes": "/changes" in api_paths, "api_commit": "/commit" in api_paths,
        "api_archive": "/archive" in api_paths, "api_push": "/push" in api_paths,
        "api_ports": "/ports" in api_paths,
        "preview": True,  # its own matrix, by role and by signed address: test_previews
    }  # fmt: skip
    covered.update(dict.fromkeys(PAGE_MATRIX, True))
    covered.update(dict.fromkeys(USER_SCOPED, True))
    names = {p.name for p in urlpatterns if getattr(p, "name", None)}
    assert names - {n for n, ok in covered.items() if ok} == set()


# -- the socket: every action ---------------------------------------------------------------
def ws_url(live: LiveServer, cid: str) -> str:
    return f"{live.url.replace('http://', 'ws://')}/ws/c/{cid}/"


async def frames_for(ws, seconds: float = 1.0, until: str | None = None) -> str:
    """Frames received within ``seconds``; with ``until``, up to the first that holds it
    (what a loaded server answers late is still its answer)."""
    received = ""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            while until is None or until not in received:
                received += await ws.recv()
    return received


SOCKET_ACTIONS = [
    {"content": "from the socket"},
    {"content": "queued", "mode": "follow_up"},
    {"action": "cancel"},
    {"action": "unqueue", "id": "abc123"},
    {"action": "compact"},
    {"action": "approve", "id": "toolu_x"},
    {"action": "deny", "id": "toolu_x"},
    {"action": "edit", "of": 1, "content": "edited"},
    {"action": "regenerate"},
    {"action": "branch", "id": 0},
]


@pytest.mark.parametrize("role", ROLES)
async def test_ownership_matrix_of_the_socket_and_its_actions(live, apis, fresh, role):
    cid = await asyncio.to_thread(shared_conversation, apis, team=role != "stranger")
    headers = {}
    if role != "anonymous":
        session = await asyncio.to_thread(sign_in, live, NAMES[role], f"pw-{NAMES[role]}-1234")
        headers = {"Cookie": f"sessionid={session}"}
    if role not in READS:  # not found: closed before it is accepted (the handshake fails)
        with pytest.raises(InvalidStatus) as refused:
            async with connect(ws_url(live, cid), origin=live.url, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403
        return
    async with connect(ws_url(live, cid), origin=live.url, additional_headers=headers) as ws:
        await ws.send(json.dumps({"action": "sync", "after": 0}))
        assert "forbidden" not in await frames_for(ws, 0.5)  # any reader may catch up
        for frame in SOCKET_ACTIONS:
            await ws.send(json.dumps(frame))
            if role in DRIVES:
                answer = await frames_for(ws, 0.5)
                assert 'data-code="forbidden"' not in answer, (frame, answer)
            else:  # each refused action is answered once, in order
                answer = await frames_for(ws, 15, until='data-code="forbidden"')
                assert 'data-code="forbidden"' in answer, (frame, answer)
            if role in DRIVES:  # a prompt, a compaction: each run to its end
                await asyncio.to_thread(wait_quiet, apis["owner"], cid)
    if role not in DRIVES:  # nothing ran: no event was stored
        listed = await asyncio.to_thread(apis["owner"].call, "GET", f"/api/conversations/{cid}")
        assert listed[1]["state"] == "idle"
        _, stream = await asyncio.to_thread(apis["owner"].events, cid, read_timeout=1)
        assert await asyncio.to_thread(drain, stream) == []


def wait_quiet(api: Api, cid: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while api.call("GET", f"/api/conversations/{cid}")[1]["state"] == "running":
        assert time.monotonic() < deadline, "still running"
        time.sleep(0.05)


def drain(stream) -> list:
    got = []
    try:
        for item in stream:
            if item[0] == "event":
                got.append(item)
    except (TimeoutError, OSError):
        pass
    return got


# -- a collaborator's run -------------------------------------------------------------------
def test_a_collaborators_prompt_runs_in_the_owners_workspace_on_the_owners_budget(
    apis, fresh, live
):
    cid = shared_conversation(apis, team=False)
    owner, cole, vera = apis["owner"], apis["collaborator"], apis["viewer"]
    before = owner.call("GET", "/api/usage")[1]["month_to_date_usd"]
    cole_before = cole.call("GET", "/api/usage")[1]["month_to_date_usd"]
    response, watching = vera.events(cid, timeout=15)  # the viewer watches it live
    assert response.status == 200
    fresh.enqueue(tool_reply(("write", {"path": "by-cole.txt", "content": "from cole\n"})),
                  text_reply("Written."))  # fmt: skip
    assert cole.call("POST", f"/api/conversations/{cid}/prompt",
                     {"content": "write it"}) == (202, {"accepted": True})  # fmt: skip
    seen = [item[2] for item in read_until(watching, is_final) if item[0] == "event"]
    response.close()
    user = next(e for e in seen if e["type"] == "user")
    assert user["author"] == "cole" and user["content"] == "write it"
    assert any(e["type"] == "tool_result" and not e["isError"] for e in seen)
    # The file is in olga's workspace, not cole's.
    assert owner.call("GET", "/api/files/by-cole.txt") == (200, "from cole\n")
    assert cole.call("GET", "/api/files/by-cole.txt")[0] == 404
    # Billed to olga.
    wait_state(owner, cid, "idle")
    assert owner.call("GET", "/api/usage")[1]["month_to_date_usd"] > before
    assert cole.call("GET", "/api/usage")[1]["month_to_date_usd"] == cole_before
    # The owner's own prompts on a shared conversation name her too.
    assert owner.call("POST", f"/api/conversations/{cid}/prompt", {"content": "mine"})[0] == 202
    wait_state(owner, cid, "idle")
    _, replay = owner.events(cid, timeout=5)
    endings = iter(range(2, 0, -1))  # the second prompt's ending
    items = read_until(replay, lambda item: is_final(item) and next(endings) == 1)
    users = [item[2] for item in items if item[0] == "event" and item[2]["type"] == "user"]
    assert [(u["content"], u["author"]) for u in users][-2:] == [("write it", "cole"),
                                                                   ("mine", "olga")]  # fmt: skip


def test_a_collaborators_prompt_is_refused_when_the_owners_budget_is_spent(apis, fresh, live):
    cid = shared_conversation(apis, team=False)
    live.manage(
        "shell",
        "-c",
        "from agent.models import User; "
        "User.objects.filter(username='olga').update(monthly_budget_usd='0.00001')",
    )
    try:
        # olga spends (unless an earlier test here did already): her budget is then spent
        status, _ = apis["owner"].call("POST", f"/api/conversations/{cid}/prompt",
                                       {"content": "one"})  # fmt: skip
        assert status in (202, 429)
        wait_quiet(apis["owner"], cid)
        assert apis["collaborator"].call("GET", "/api/usage")[1]["month_to_date_usd"] == 0
        asked = len(fresh.requests)
        status, body = apis["collaborator"].call("POST", f"/api/conversations/{cid}/prompt",
                                                 {"content": "two"})  # fmt: skip
        assert status == 429 and body["error"] == "budget_exceeded", body
        assert len(fresh.requests) == asked  # nothing ran
    finally:
        live.manage(
            "shell",
            "-c",
            "from agent.models import User; "
            "User.objects.filter(username='olga').update(monthly_budget_usd=None)",
        )


def test_a_conversation_never_shared_keeps_its_user_events_without_author(apis, fresh):
    owner = apis["owner"]
    cid = new_conversation(owner)
    assert owner.call("POST", f"/api/conversations/{cid}/prompt", {"content": "solo"})[0] == 202
    _, replay = owner.events(cid, timeout=5)
    users = [
        i[2] for i in read_until(replay, is_final) if i[0] == "event" and i[2]["type"] == "user"
    ]
    assert users and "author" not in users[0]


# -- revocation while connected -------------------------------------------------------------
def stream_ends_within(stream, seconds: float) -> bool:
    started = time.monotonic()
    try:
        for _ in stream:
            pass
    except TimeoutError:
        return False
    return time.monotonic() - started < seconds


@pytest.mark.parametrize("revoke", ["remove", "team_off", "deactivate_owner"])
def test_a_revoked_reader_loses_the_open_event_stream_at_once(apis, fresh, live, revoke):
    owner = apis["owner"]
    cid = shared_conversation(apis, team=revoke == "team_off")
    reader = apis["team"] if revoke == "team_off" else apis["viewer"]
    assert owner.call("POST", f"/api/conversations/{cid}/prompt", {"content": "hi"})[0] == 202
    response, stream = reader.events(cid, timeout=CLOSE_WITHIN * 2)
    assert response.status == 200
    read_until(stream, is_final)
    if revoke == "remove":
        assert owner.call("DELETE", f"/api/conversations/{cid}/members/vera")[0] == 204
    elif revoke == "team_off":
        assert owner.call("PATCH", f"/api/conversations/{cid}", {"team": False})[0] == 200
    else:
        live.manage("shell", "-c", "from agent.models import User; u = User.objects.get("
                    "username='olga'); u.is_active = False; u.save()")  # fmt: skip
    try:
        assert stream_ends_within(stream, CLOSE_WITHIN)
        assert reader.call("GET", f"/api/conversations/{cid}")[0] == 404
    finally:
        live.manage(
            "shell",
            "-c",
            "from agent.models import User; "
            "User.objects.filter(username='olga').update(is_active=True)",
        )


async def test_a_removed_member_loses_the_open_socket_at_once(apis, live):
    cid = await asyncio.to_thread(shared_conversation, apis, team=False)
    session = await asyncio.to_thread(sign_in, live, "vera", "pw-vera-1234")
    async with connect(ws_url(live, cid), origin=live.url,
                       additional_headers={"Cookie": f"sessionid={session}"}) as ws:  # fmt: skip
        await ws.send(json.dumps({"action": "sync", "after": 0}))
        await frames_for(ws, 0.3)
        status, _ = await asyncio.to_thread(
            apis["owner"].call, "DELETE", f"/api/conversations/{cid}/members/vera"
        )
        assert status == 204
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(CLOSE_WITHIN):
                while True:
                    await ws.recv()
        assert closed.value.rcvd.code == 4404


async def test_a_collaborator_made_viewer_keeps_watching_but_can_no_longer_drive(apis, live, fresh):
    cid = await asyncio.to_thread(shared_conversation, apis, team=False)
    session = await asyncio.to_thread(sign_in, live, "cole", "pw-cole-1234")
    async with connect(ws_url(live, cid), origin=live.url,
                       additional_headers={"Cookie": f"sessionid={session}"}) as ws:  # fmt: skip
        status, _ = await asyncio.to_thread(
            apis["owner"].call, "PUT", f"/api/conversations/{cid}/members/cole", {"role": "viewer"}
        )
        assert status == 200
        await ws.send(json.dumps({"content": "still driving?"}))
        forbidden = 'data-code="forbidden"'
        assert forbidden in await frames_for(ws, 15, until=forbidden)
        await ws.send(json.dumps({"action": "sync", "after": 0}))  # still open: it may read
        assert "forbidden" not in await frames_for(ws, 0.5)
    status, body = await asyncio.to_thread(
        apis["collaborator"].call, "POST", f"/api/conversations/{cid}/prompt", {"content": "x"}
    )
    assert status == 403 and body["error"] == "forbidden"


def test_search_covers_shared_conversations_and_not_others(apis, fresh):
    cid = shared_conversation(apis, team=False)
    owner = apis["owner"]
    assert owner.call("POST", f"/api/conversations/{cid}/prompt",
                      {"content": "zanzibar quokka"})[0] == 202  # fmt: skip
    wait_state(owner, cid, "idle")
    for role in ("owner", "collaborator", "viewer"):
        found = apis[role].call("GET", "/api/search?q=quokka")[1]["results"]
        assert cid in {r["conversation"] for r in found}, role
    assert cid not in {
        r["conversation"]
        for r in apis["stranger"].call("GET", "/api/search?q=quokka")[1]["results"]
    }


def test_a_removed_collaborators_queued_prompts_never_run(apis, fresh):
    """Finding 6: the prompts a collaborator queued still ran in the owner's workspace
    after their removal. They are dropped (``unqueued``, reason ``access_lost``) at once."""
    owner, cole = apis["owner"], apis["collaborator"]
    cid = shared_conversation(apis, team=False)
    fresh.enqueue(text_reply("slow " * 400, delay=0.01), text_reply("owner's follow-up"))
    response, stream = owner.events(cid, timeout=30)
    assert owner.call("POST", f"/api/conversations/{cid}/prompt", {"content": "long"})[0] == 202
    read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "text_delta")
    status, body = cole.call("POST", f"/api/conversations/{cid}/prompt",
                             {"content": "cole's follow-up", "mode": "follow_up"})  # fmt: skip
    assert status == 202 and body.get("queued"), body
    assert owner.call("DELETE", f"/api/conversations/{cid}/members/cole")[0] == 204
    items = read_until(stream, lambda i: i[0] == "event" and i[2]["type"] == "status"
                       and i[2]["state"] in ("idle", "error"), timeout=30)  # fmt: skip
    events = [i[2] for i in items if i[0] == "event"]
    dropped = [e for e in events if e["type"] == "unqueued"]
    assert [e.get("reason") for e in dropped] == ["access_lost"], events
    assert not any(e["type"] == "user" and e["content"] == "cole's follow-up" for e in events)
