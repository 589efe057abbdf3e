"""The workspace over the API (docs/API.md): upload, list, download, delete, confined
like the agent's tools (the traversal corpus, a symlink out), uploads capped before the
body is read (and every other request's body too, signed in or not)."""

from __future__ import annotations

import http.client
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from testkit.api_client import Api
from testkit.live import LiveServer
from tests.core.test_confinement_corpus import CANARY, payloads

MB = 1024 * 1024


@pytest.fixture(scope="module")
def live(tmp_path_factory, model):
    server = LiveServer(tmp_path_factory.mktemp("files-api"), ANTHROPIC_API_KEY="test-key",
                        ANTHROPIC_BASE_URL=model.url, HARNESS_BASH="off",
                        HARNESS_MAX_UPLOAD_MB="1")  # fmt: skip
    server.start()
    server.create_users("fay", "gus")
    yield server
    server.stop()


def token(live, name: str) -> Api:
    return Api(live.url, live.manage("create_api_token", name).strip())


def put(api: Api, path: str, data: bytes):
    return api.call("PUT", "/api/files/" + quote(path, safe="/"), raw=data)


def test_upload_list_download_and_delete(live):
    fay, gus = token(live, "fay"), token(live, "gus")
    status, body = put(fay, "notes/today/plan.html", b"<script>alert(1)</script>")
    assert (status, body) == (201, {"path": "notes/today/plan.html", "size": 25})
    assert put(fay, "notes/today/plan.html", b"v2")[0] == 200  # replaced
    listing = fay.call("GET", "/api/files/notes/today")[1]
    assert listing["entries"] == [{"name": "plan.html", "type": "file", "size": 2}]
    assert {e["name"] for e in fay.call("GET", "/api/files/")[1]["entries"]} >= {"notes"}
    connection = http.client.HTTPConnection(live.url.split("//")[1])
    connection.request("GET", "/api/files/notes/today/plan.html", headers=fay._headers())
    response = connection.getresponse()
    assert response.status == 200 and response.read() == b"v2"
    assert response.getheader("Content-Disposition").startswith("attachment")
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert response.getheader("Content-Type") == "application/octet-stream"
    assert gus.call("GET", "/api/files/notes/today/plan.html")[0] == 404  # gus's own workspace
    assert fay.call("DELETE", "/api/files/notes/today/plan.html")[0] == 204
    assert fay.call("GET", "/api/files/notes/today/plan.html")[0] == 404
    assert fay.call("DELETE", "/api/files/notes/today/plan.html")[0] == 404
    assert fay.call("DELETE", "/api/files/notes")[0] == 400  # not empty
    assert Api(live.url, None).call("GET", "/api/files/")[0] == 401


def test_no_path_of_the_traversal_corpus_leaves_the_workspace(live):
    fay = token(live, "fay")
    put(fay, "inside.txt", b"here")
    for level in (live.root, live.root / "workspaces"):
        (level / "canary.txt").write_text(CANARY)

    def attack(path: str) -> None:
        status, body = put(fay, path, b"PWNED")
        assert status in (201, 200, 400, 404), (path, status, body)
        status, body = fay.call("GET", "/api/files/" + quote(path, safe="/"))
        assert CANARY not in str(body), path

    # (a fifth of the corpus, each path two requests; four paths at a time, as the
    # requests of one user's several tabs or scripts would come)
    paths = [path for path in payloads()[::5] if "\x00" not in path]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(attack, paths))
    for level in (live.root, live.root / "workspaces"):
        assert (level / "canary.txt").read_text() == CANARY
    outside = [
        os.path.join(d, f) for d, _, files in os.walk(live.root)
        if not d.startswith(str(live.root / "workspaces") + "/") for f in files
        if Path(d, f).read_bytes()[:5] == b"PWNED"
    ]  # fmt: skip
    assert outside == []


def test_a_symlink_out_of_the_workspace_is_not_followed(live):
    fay = token(live, "fay")
    put(fay, "seed.txt", b"x")
    workspace = next(p for p in (live.root / "workspaces").iterdir() if (p / "seed.txt").exists())
    (workspace / "out").symlink_to(live.root)
    (live.root / "secret.txt").write_text("HOST SECRET")
    assert fay.call("GET", "/api/files/out/secret.txt")[0] == 400
    assert put(fay, "out/planted.txt", b"PWNED")[0] == 400
    assert not (live.root / "planted.txt").exists()
    assert fay.call("DELETE", "/api/files/out/secret.txt")[0] == 400
    assert (live.root / "secret.txt").exists()


def test_an_upload_over_the_limit_is_refused_before_it_is_read(live):
    fay = token(live, "fay")
    status, body = put(fay, "big.bin", b"x" * (MB + 1))
    assert status == 413 and body["error"] == "too_large"
    # A chunked body (no Content-Length) is cut off as it passes the limit.
    host = live.url.split("//")[1]
    connection = http.client.HTTPConnection(host)
    connection.putrequest("PUT", "/api/files/chunked.bin")
    for name, value in {**fay._headers(), "Transfer-Encoding": "chunked"}.items():
        connection.putheader(name, value)
    connection.endheaders()
    chunk = b"y" * 65536
    try:
        for _ in range(40):  # 2.5 MB
            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        connection.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: what the test expects
    assert connection.getresponse().status == 413
    assert fay.call("GET", "/api/files/chunked.bin")[0] == 404


def test_every_requests_body_is_capped_signed_in_or_not(live):
    """Refused from its declared length, before Django reads it: a page's reason in text,
    the API's in JSON. (Daphne has read it by then: in front of Daphne, the deployment's
    nginx refuses it unread, tests/deploy/test_kit_proxy.py.)"""
    host = live.url.split("//")[1]
    size = 3 * MB  # more than any path of this server takes
    for path, kind in (
        ("/accounts/login/", "text/plain"),
        ("/api/conversations", "application/json"),
    ):
        connection = http.client.HTTPConnection(host)
        connection.putrequest("POST", path)
        connection.putheader("Content-Length", str(size))
        connection.putheader("Content-Type", "application/x-www-form-urlencoded")
        connection.endheaders()
        connection.send(b"a" * size)
        response = connection.getresponse()
        assert response.status == 413, path
        assert response.getheader("Content-Type").startswith(kind), path
        assert b"over the limit" in response.read(), path
