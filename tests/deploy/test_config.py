"""Config validation and the strict environment readers behind the settings."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured

from agent.core.config import Config, ConfigError
from harness_site.env import env_bool, env_choice, env_int, env_list, env_str
from tests.conftest import REPO


def test_config_defaults_follow_the_seed():
    config = Config()
    assert (config.max_tokens, config.max_turns, config.thinking_budget) == (4096, 10, 0)
    assert config.model.startswith("claude-haiku") and config.offline


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model": ""}, "model"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_turns": 0}, "max_turns"),
        ({"thinking_budget": 100}, "thinking_budget"),
        ({"thinking_budget": 5000, "max_tokens": 4096}, "thinking_budget"),
        ({"thinking_budget": -1}, "thinking_budget"),
    ],
)
def test_invalid_config_names_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        Config(**changes)


def test_api_key_presence_selects_the_real_model():
    assert not Config(api_key="sk-x").offline


def test_env_helpers_read_and_reject(monkeypatch):
    monkeypatch.setenv("X_INT", "12")
    monkeypatch.setenv("X_BAD", "twelve")
    monkeypatch.setenv("X_BOOL", "yes")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env_int("X_INT", 1) == 12 and env_int("X_UNSET", 7) == 7
    assert env_bool("X_BOOL", False) is True and env_list("X_LIST", []) == ["a", "b", "c"]
    assert env_str("X_UNSET", "d") == "d"
    with pytest.raises(ImproperlyConfigured, match="X_BAD"):
        env_int("X_BAD", 1)
    with pytest.raises(ImproperlyConfigured, match="X_BAD"):
        env_bool("X_BAD", False)
    with pytest.raises(ImproperlyConfigured, match="X_BAD"):
        env_choice("X_BAD", ("a", "b"), "a")
    monkeypatch.setenv("X_NEG", "-1")
    with pytest.raises(ImproperlyConfigured, match="X_NEG"):
        env_int("X_NEG", 1, minimum=0)


def _settings_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "HARNESS_"))}
    env.update(extra)
    return env


def _load_settings(**extra):
    code = "import harness_site.settings as s; print(s.DEBUG, s.HARNESS_MAX_TURNS)"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_settings_env(**extra),
                          capture_output=True, text=True)  # fmt: skip


@pytest.mark.parametrize(
    "name, value",
    [
        ("HARNESS_MAX_TURNS", "ten"),
        ("HARNESS_MAX_TOKENS", "0"),
        ("HARNESS_THINKING", "500"),
        ("HARNESS_BASH", "docker"),
        ("HARNESS_EGRESS", "open"),
        ("HARNESS_SSE_HEARTBEAT", "soon"),
        ("HARNESS_SOCKETS_PER_USER", "0"),
        ("DJANGO_DEBUG", "maybe"),
        ("HARNESS_LOG_LEVEL", "LOUD"),
        ("HARNESS_LOG_FORMAT", "xml"),
    ],
)
def test_bad_setting_stops_start_up_naming_the_variable(name, value):
    proc = _load_settings(**{"DJANGO_DEBUG": "1", name: value})
    assert proc.returncode != 0 and name in proc.stderr


def test_production_requires_secret_key_and_hosts():
    assert "DJANGO_SECRET_KEY" in _load_settings().stderr
    key = "k-" + "abcdefghij" * 5
    proc = _load_settings(DJANGO_SECRET_KEY=key)
    assert proc.returncode != 0 and "DJANGO_ALLOWED_HOSTS" in proc.stderr
    proc = _load_settings(DJANGO_SECRET_KEY=key, DJANGO_ALLOWED_HOSTS="*")
    assert proc.returncode != 0 and "DJANGO_ALLOWED_HOSTS" in proc.stderr
    proc = _load_settings(DJANGO_SECRET_KEY=key, DJANGO_ALLOWED_HOSTS="harness.example")
    assert proc.returncode == 0 and proc.stdout.split() == ["False", "10"]


def test_production_settings_pass_check_deploy_at_warning_level():
    import secrets

    env = _settings_env(DJANGO_SECRET_KEY=secrets.token_urlsafe(60),
                        DJANGO_ALLOWED_HOSTS="harness.example.com",
                        DJANGO_SETTINGS_MODULE="harness_site.settings")  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout


def test_production_refuses_a_short_secret_key():
    proc = _load_settings(DJANGO_SECRET_KEY="short", DJANGO_ALLOWED_HOSTS="h.example")
    assert proc.returncode != 0 and "DJANGO_SECRET_KEY" in proc.stderr


def test_compact_at_is_a_fraction_of_the_window(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from harness_site.env import env_fraction

    monkeypatch.setenv("X_FRACTION", "0.6")
    assert env_fraction("X_FRACTION", 0.8, minimum=0.1) == 0.6
    assert env_fraction("X_UNSET_FRACTION", 0.8) == 0.8
    for bad in ("1.5", "0.05", "most"):
        monkeypatch.setenv("X_FRACTION", bad)
        with pytest.raises(ImproperlyConfigured, match="X_FRACTION"):
            env_fraction("X_FRACTION", 0.8, minimum=0.1)


def test_a_monthly_budget_is_an_amount(monkeypatch):
    from decimal import Decimal

    from django.core.exceptions import ImproperlyConfigured

    from harness_site.env import env_amount

    assert env_amount("X_UNSET_AMOUNT") is None
    monkeypatch.setenv("X_AMOUNT", "12.50")
    assert env_amount("X_AMOUNT") == Decimal("12.50")
    for bad in ("-1", "lots", "NaN", "Infinity"):
        monkeypatch.setenv("X_AMOUNT", bad)
        with pytest.raises(ImproperlyConfigured, match="X_AMOUNT"):
            env_amount("X_AMOUNT")


def test_runserver_serves_asgi_and_no_other_command_loads_twisted():
    """Daphne's app (its `runserver`, which serves the ASGI application with WebSockets)
    is installed for `runserver` alone: other commands, the CLI's start among them, do not
    pay for Twisted's reactor."""
    env = _settings_env(DJANGO_DEBUG="1", DJANGO_SETTINGS_MODULE="harness_site.settings")
    manage = [sys.executable, "manage.py"]
    helped = subprocess.run([*manage, "runserver", "--help"], cwd=REPO, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert helped.returncode == 0 and "--noasgi" in helped.stdout  # Daphne's own option
    code = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] == 'twisted'))"
    shell = subprocess.run([*manage, "shell", "-c", code], cwd=REPO, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert shell.returncode == 0 and shell.stdout.splitlines()[-1] == "[]", shell.stderr
