"""/healthz as a production deployment's probes reach it: plain HTTP to 127.0.0.1 on the
port, with DJANGO_DEBUG=0 (Daphne, the real settings), and what it reports: the sandbox's
self-test, the version and the uptime."""

from __future__ import annotations

import http.client
import json
import secrets
import shutil

import pytest

from testkit.live import LiveServer

HOST = "harness.example.com"


def _request(server: LiveServer, method: str, path: str, host: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request(method, path, headers={"Host": host})
    response = conn.getresponse()
    response.body = response.read()
    conn.close()
    return response


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    server = LiveServer(
        tmp_path_factory.mktemp("production"),
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
        DJANGO_ALLOWED_HOSTS=HOST,
    )
    server.start()  # waits for GET http://127.0.0.1:PORT/healthz to answer "ok"
    yield server
    server.stop()


def test_a_local_probe_gets_healthz_in_production_with_any_host(production):
    for host in ("127.0.0.1", f"127.0.0.1:{production.port}", "localhost", HOST):
        response = _request(production, "GET", "/healthz", host)
        assert response.status == 200, (host, response.status, response.body[:200])
        assert json.loads(response.body)["status"] == "ok"
    assert _request(production, "HEAD", "/healthz", "127.0.0.1").status == 200


def test_other_paths_and_methods_keep_the_host_check_and_the_https_redirect(production):
    assert _request(production, "GET", "/", "evil.example").status == 400
    assert _request(production, "GET", "/accounts/login/", "127.0.0.1").status == 400
    assert _request(production, "POST", "/healthz", "evil.example").status == 400
    assert _request(production, "GET", "/healthz/", "evil.example").status == 400
    redirect = _request(production, "GET", "/", HOST)
    assert redirect.status == 301
    assert redirect.getheader("Location") == f"https://{HOST}/"


def test_healthz_reports_the_sandbox_self_test_version_and_uptime(production):
    body = json.loads(_request(production, "GET", "/healthz", "127.0.0.1").body)
    assert body["sandbox"] == ("ok" if shutil.which("bwrap") else "off (HARNESS_BASH=off)")
    assert body["version"] == "0.1.0"
    assert 0 < body["uptime_seconds"] < 600
    expected = {"database", "channel_layer", "state_dir", "workspaces_disk", "database_disk"}
    assert all(body[name] == "ok" for name in expected)


# -- in process: the sandbox check's outcomes --------------------------------------------


def _fake_bwrap(directory, script: str) -> None:
    directory.mkdir()
    bwrap = directory / "bwrap"
    bwrap.write_text("#!/bin/sh\n" + script)
    bwrap.chmod(0o755)


@pytest.mark.django_db
def test_a_host_that_refuses_the_sandbox_makes_healthz_503_naming_bwraps_error(
    client, settings, tmp_path, monkeypatch
):
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "sandbox"
    # What bwrap says where unprivileged user namespaces are refused (Ubuntu 24.04's
    # AppArmor restriction, a container's seccomp profile).
    _fake_bwrap(tmp_path / "bin", "echo 'bwrap: setting up uid map: Permission denied' >&2\n"
                                  "exit 1\n")  # fmt: skip
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error" and body["database"] == "ok"
    assert body["sandbox"].startswith("error: bwrap exited with status 1 (bwrap: setting up")
    assert "docs/DEPLOY.md" in body["sandbox"]


@pytest.mark.django_db
def test_a_missing_bwrap_fails_healthz_and_bash_off_passes_it(client, settings, tmp_path,
                                                              monkeypatch):  # fmt: skip
    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    settings.HARNESS_BASH = "sandbox"
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    response = client.get("/healthz")
    assert response.status_code == 503
    assert "bubblewrap (bwrap) is not installed" in response.json()["sandbox"]
    settings.HARNESS_BASH = "off"
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["sandbox"] == "off (HARNESS_BASH=off)"
