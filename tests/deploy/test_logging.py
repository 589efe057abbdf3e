"""Logging by environment (level, text or JSON lines) with request and conversation ids,
secrets kept out of logs (masked, the first superuser's password, *_FILE variables)."""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import stat
import subprocess
import sys
import time

import pytest

from agent.server.logs import REDACTED, JsonFormatter, TextFormatter
from testkit.api_client import Api
from testkit.live import LiveServer
from testkit.model_server import text_reply
from tests.conftest import REPO
from tests.deploy.test_config import _settings_env

API_KEY = "sk-ant-test-" + "s3cr3t" * 6


def _records(server: LiveServer) -> list[dict]:
    lines = server.log.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def _wait_for(server: LiveServer, match, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r for r in _records(server) if match(r)]
        if found:
            return found[0]
        time.sleep(0.1)
    raise AssertionError(f"no such record in:\n{server.log.read_text()[-3000:]}")


def test_json_logs_carry_the_request_and_conversation_ids(tmp_path, model):
    model.reset()
    model.fallback = lambda body: text_reply("hello")
    server = LiveServer(tmp_path, HARNESS_LOG_FORMAT="json", HARNESS_LOG_LEVEL="INFO",
                        ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=model.url,
                        HARNESS_BASH="off").start()  # fmt: skip
    try:
        server.create_users("alice")
        api = Api(server.url, server.manage("create_api_token", "alice").strip())
        status, created = api.call("POST", "/api/conversations", {})
        assert status == 201
        conversation = created["id"]
        status, _ = api.call("POST", f"/api/conversations/{conversation}/prompt",
                             {"content": "hi"})  # fmt: skip
        assert status == 202
        started = _wait_for(server, lambda r: r["message"].startswith("run started"))
        assert started["conversation_id"] == conversation and started["level"] == "INFO"
        _wait_for(server, lambda r: r["message"] == "run ended")

        # A refused request: Django's own record of it names the request and conversation.
        stranger = Api(server.url, "not-a-token")
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request("GET", f"/api/conversations/{conversation}",
                           headers={"Authorization": "Bearer nope"})  # fmt: skip
        response = connection.getresponse()
        response.read()
        assert response.status == 401
        request_id = response.getheader("X-Request-ID")
        assert request_id and len(request_id) == 32
        refused = _wait_for(server, lambda r: r.get("request_id") == request_id)
        assert refused["logger"] == "django.request" and refused["level"] == "WARNING"
        assert refused["conversation_id"] == conversation
        assert stranger.call("GET", "/api/conversations")[0] == 401
        assert API_KEY not in server.log.read_text()
    finally:
        server.stop()


def test_a_well_formed_proxy_request_id_is_kept_and_anything_else_replaced():
    from agent.server.logs import new_request_id

    assert new_request_id("3f2a9c0d1e4b5a6f") == "3f2a9c0d1e4b5a6f"
    for hostile in ("x\nfake record", "short", "a" * 65, None):
        made = new_request_id(hostile)
        assert made != hostile and len(made) == 32 and made.isalnum()


@pytest.mark.parametrize("formatter_class", [JsonFormatter, TextFormatter])
def test_a_configured_secret_is_masked_in_messages_and_tracebacks(formatter_class):
    formatter = formatter_class(secrets=(API_KEY, "short"))
    try:
        raise RuntimeError(f"upstream refused key {API_KEY}")
    except RuntimeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "calling with %s",
                                   (API_KEY,), sys.exc_info())  # fmt: skip
    text = formatter.format(record)
    assert API_KEY not in text and text.count(REDACTED) == 2
    assert "upstream refused key" in text


# -- *_FILE variables ----------------------------------------------------------------------


def _setting(expression: str, **env) -> subprocess.CompletedProcess:
    code = f"import logging.config, harness_site.settings as s; print({expression})"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, env=_settings_env(DJANGO_DEBUG="1", **env))  # fmt: skip


def test_secrets_are_read_from_their_file_without_the_trailing_newline(tmp_path):
    key_file = tmp_path / "secret_key"
    key_file.write_text("k" * 20 + "abcdefghij" * 4 + "\n")
    api_file = tmp_path / "api_key"
    api_file.write_text(API_KEY + "\r\n")
    db_file = tmp_path / "database_url"
    db_file.write_text(f"sqlite:///{tmp_path}/x.sqlite3\n")
    values = "repr((s.SECRET_KEY, s.ANTHROPIC_API_KEY, str(s.DATABASES['default']['NAME'])))"
    proc = _setting(values, DJANGO_SECRET_KEY_FILE=str(key_file),
                    ANTHROPIC_API_KEY_FILE=str(api_file),
                    DATABASE_URL_FILE=str(db_file))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(
        ("k" * 20 + "abcdefghij" * 4, API_KEY, f"{tmp_path}/x.sqlite3")
    )


def test_a_secret_set_twice_missing_or_empty_stops_start_up_naming_it(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(API_KEY)
    proc = _setting("1", ANTHROPIC_API_KEY="x", ANTHROPIC_API_KEY_FILE=str(key_file))
    assert proc.returncode != 0
    assert "set ANTHROPIC_API_KEY or ANTHROPIC_API_KEY_FILE, not both" in proc.stderr
    proc = _setting("1", REDIS_URL_FILE=str(tmp_path / "absent"))
    assert proc.returncode != 0 and "REDIS_URL_FILE: cannot read" in proc.stderr
    (tmp_path / "empty").write_text("\n")
    proc = _setting("1", DJANGO_SECRET_KEY_FILE=str(tmp_path / "empty"))
    assert proc.returncode != 0 and "DJANGO_SECRET_KEY_FILE" in proc.stderr
    assert "is empty" in proc.stderr


# -- the first superuser's password --------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.django_db
def test_the_first_superusers_password_goes_to_a_private_file_when_output_is_no_terminal(
    capsys, settings, tmp_path
):
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    settings.VAR_DIR = tmp_path / "var"
    call_command("ensure_superuser")
    said = capsys.readouterr().out
    path = tmp_path / "var" / "initial-superuser-password"
    assert str(path) in said and "password:" not in said
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    username, password = (line.split(": ", 1)[1] for line in path.read_text().splitlines())
    assert password not in said
    admin = get_user_model().objects.get(username=username)
    assert admin.is_superuser and admin.check_password(password)
    call_command("ensure_superuser")  # a superuser exists: nothing made, nothing said
    assert capsys.readouterr().out == ""


@pytest.mark.django_db
def test_the_first_superusers_password_is_printed_once_on_a_terminal(settings, tmp_path):
    from django.core.management import call_command

    settings.VAR_DIR = tmp_path / "var"
    terminal = _Terminal()
    call_command("ensure_superuser", stdout=terminal)
    assert "password: " in terminal.getvalue()
    assert not (tmp_path / "var" / "initial-superuser-password").exists()


def test_debug_logs_the_apps_records_not_markdown_its_traces_or_the_sdks_request_bodies():
    """HARNESS_LOG_LEVEL=DEBUG: markdown-it would trace every block rule on every line
    (hundreds of MB in minutes of streaming) and the SDK each request's whole body."""
    levels = (
        "(logging.config.dictConfig(s.LOGGING), [logging.getLogger(n).isEnabledFor(logging.DEBUG)"
        " for n in ('agent.runs', 'markdown_it.rules_block.fence', 'anthropic._base_client')])[1]"
    )
    proc = _setting(levels, HARNESS_LOG_LEVEL="DEBUG")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[True, False, False]"
    quiet = _setting(levels, HARNESS_LOG_LEVEL="ERROR")
    assert quiet.stdout.strip() == "[False, False, False]"
