"""The web skeleton: sign-in, the start page, /healthz, and Daphne actually serving it."""

from __future__ import annotations

import json
import urllib.request

import pytest

from testkit.live import LiveServer


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user(username="ada", password="pw-ada-123")


def test_start_page_requires_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_signed_in_user_sees_the_offline_banner(client, user, settings):
    settings.ANTHROPIC_API_KEY = None
    client.force_login(user)
    page = client.get("/", follow=True).content.decode()
    assert "ada" in page and "Offline demo model" in page


def test_banner_is_absent_with_an_api_key(client, user, settings):
    settings.ANTHROPIC_API_KEY = "sk-ant-test"
    client.force_login(user)
    page = client.get("/", follow=True).content.decode()
    assert "Offline demo model" not in page and "sk-ant-test" not in page


def test_login_page_renders_with_csrf(client):
    page = client.get("/accounts/login/").content.decode()
    assert "csrfmiddlewaretoken" in page and 'name="username"' in page


@pytest.mark.django_db
def test_healthz_reports_database_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    checks = {k: v for k, v in body.items()
              if k not in ("sandbox", "version", "uptime_seconds", "cli_agents")}  # fmt: skip
    assert "tmux" in body["cli_agents"]  # informational
    assert checks == {"status": "ok", "database": "ok", "channel_layer": "ok", "state_dir": "ok",
                      "workspaces_disk": "ok", "database_disk": "ok"}  # fmt: skip


def test_prompt_history_is_fifo_100_deduplicated(user):
    for i in range(105):
        user.remember_prompt(f"p{i}")
    user.remember_prompt("p104")  # same as the newest: not stored twice
    assert len(user.prompt_history) == 100
    assert user.prompt_history[0] == "p5" and user.prompt_history[-1] == "p104"


def test_daphne_serves_the_site(tmp_path):
    server = LiveServer(tmp_path).start()  # migrates, starts Daphne, waits for /healthz
    try:
        with urllib.request.urlopen(f"{server.url}/healthz") as r:
            assert json.loads(r.read())["status"] == "ok"
        with urllib.request.urlopen(f"{server.url}/accounts/login/") as r:
            assert r.status == 200 and b"Harness" in r.read()
    finally:
        server.stop()
