"""The web skeleton: sign-in, the start page, /healthz, and Daphne actually serving it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import REPO


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
    assert body == {"status": "ok", "database": "ok", "channel_layer": "ok"}


def test_prompt_history_is_fifo_100_deduplicated(user):
    for i in range(105):
        user.remember_prompt(f"p{i}")
    user.remember_prompt("p104")  # same as the newest: not stored twice
    assert len(user.prompt_history) == 100
    assert user.prompt_history[0] == "p5" and user.prompt_history[-1] == "p104"


def test_ensure_superuser_prints_the_password_once(db, capsys):
    from django.core.management import call_command

    call_command("ensure_superuser")
    first = capsys.readouterr().out
    call_command("ensure_superuser")
    assert "password:" in first and capsys.readouterr().out == ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_daphne_serves_the_site(tmp_path):
    env = {**os.environ, "DJANGO_DEBUG": "1",
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env,
                   check=True)  # fmt: skip
    port = _free_port()
    daphne = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "harness_site.asgi:application"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    health = json.loads(r.read())
                break
            except OSError:
                assert daphne.poll() is None, daphne.stderr.read().decode()
                assert time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.2)
        assert health["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/") as r:
            assert r.status == 200 and b"Harness" in r.read()
    finally:
        daphne.terminate()
        daphne.wait(timeout=10)
