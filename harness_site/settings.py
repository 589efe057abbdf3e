"""Django settings, read from the environment (README.md, "Configuration") through strict
helpers (harness_site/env.py).

``DJANGO_DEBUG=1`` (the ``make run`` default) gives a zero-config development setup;
without it, an explicit secret key and allowed hosts are required, except of the print
mode (``python manage.py agent``), which serves nothing.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from agent.core.config import APPROVAL_MODES, DEFAULT_MODEL, MIN_THINKING_BUDGET
from agent.core.egress_rules import BadRule, parse_rules
from agent.core.tools import BASH_MODES

from .env import (
    env_amount,
    env_bool,
    env_choice,
    env_fraction,
    env_int,
    env_list,
    env_secret,
    env_str,
)
from .sso import oidc_settings

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

DEBUG = env_bool("DJANGO_DEBUG", False)
# The `manage.py` command this process runs (None for a server started otherwise: Daphne).
MANAGE_COMMAND = None
if Path(sys.argv[0]).name == "manage.py" and len(sys.argv) > 1:
    MANAGE_COMMAND = sys.argv[1]
# Commands that serve no requests and sign nothing need neither the secret key nor the
# allowed hosts a server must be given: print mode, `python manage.py agent` (one prompt,
# printed), and `create_api_token` (a token is stored as its SHA-256, with no key), which
# the README gives as is (`make run` sets DJANGO_DEBUG=1; a second shell has no reason to).
# Told by the command line, so no variable can turn a server's requirements off.
KEYLESS_COMMANDS = ("agent", "create_api_token")
KEYLESS = MANAGE_COMMAND in KEYLESS_COMMANDS

SECRET_KEY = env_secret("DJANGO_SECRET_KEY")
if SECRET_KEY is None:
    if not DEBUG and not KEYLESS:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) is required when DJANGO_DEBUG is not 1"
        )
    SECRET_KEY = "dev-insecure-" + "k" * 50  # noqa: S105 - development and keyless commands

ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
if not DEBUG and not KEYLESS and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS is required when DJANGO_DEBUG is not 1")
if "*" in ALLOWED_HOSTS and not DEBUG:
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must not contain '*' in production")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "agent",
    "axes",  # login throttling (below); last, as its documentation asks
]
# Daphne's app makes `manage.py runserver` serve the ASGI application (as Channels'
# documentation has it), and nothing else; importing it installs Twisted's reactor, a
# quarter of a second that every other command (the CLI's start among them) would pay.
if MANAGE_COMMAND == "runserver":
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    # A request id (and the conversation's) on every log record written for the request.
    "agent.server.logs.RequestContextMiddleware",
    # Then: /healthz answers a local probe before the host check and the HTTPS redirect.
    "agent.web.health.HealthProbeMiddleware",
    "agent.server.middleware.CompressionMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (below), before anything that reads a session or the database.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "agent.server.middleware.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns django-axes' lockout of a login into its page (agent/web/throttle.py).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "harness_site.urls"
ASGI_APPLICATION = "harness_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_secret("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
    )
}
# Database calls from async code run on a small pool of worker threads; each keeps its
# connection (checked before use) instead of opening one per call, which the benchmark's
# profile showed costing more CPU than the queries themselves.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL: readers (page loads, catch-ups) do not wait for the writer; IMMEDIATE: write
    # transactions take the lock up front instead of deadlocking on upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    })  # fmt: skip

REDIS_URL = env_secret("REDIS_URL")  # may hold a password
# Each process keeps one subscription per conversation its sockets watch and renders each
# batch once for them (agent/web/viewers.py), so a group message has few recipients: a
# process's viewers, and each API event stream. The queues hold a burst's frames (a
# full one drops messages; pages and streams fill such gaps from the event log).
LAYER_CAPACITY = 1000


def redis_channel_prefix(url: str) -> str:
    """The channel layer's names carry REDIS_URL's database number: Redis delivers a PUBLISH
    to every subscriber of the server, whatever database each selected, so deployments (or
    test workers) given different databases of one server would otherwise hear each other's
    group messages (a user 1 signed out in one would end user 1's streams in the other)."""
    parts = urlsplit(url)
    path = parts.path.strip("/")  # (a unix socket's URL has its file there: ?db= instead)
    database = path if path.isdigit() else parse_qs(parts.query).get("db", ["0"])[0]
    return f"harness.db{database}"


if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis's pub/sub layer: a group message is one PUBLISH, delivered to
            # each process that subscribed (not a round trip per recipient).
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            # redis-py 8 defaults to a 5 s socket timeout and to a small connection pool
            # that raises when exhausted.
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": 30,
                        "max_connections": env_int("REDIS_MAX_CONNECTIONS", 1000, minimum=10),
                    }
                ],
                "prefix": redis_channel_prefix(REDIS_URL),
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": LAYER_CAPACITY},
        }
    }

# The cache holds the rate-limit counters (agent/web/throttle.py): with REDIS_URL every process
# counts against the same limits; without, each process keeps its own.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "harness",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_USER_MODEL = "agent.User"
# django-axes' backend first: it refuses a locked-out username+address before the password
# is checked, for every caller of authenticate() (the sign-in page and the admin's).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Filled by `manage.py collectstatic` (make run, the container, the deploy kit): each file
# under its content-hashed name, with a gzipped copy (agent/server/staticfiles.py). Served
# by WhiteNoise's middleware, hashed names cached for good (immutable), others revalidated;
# nginx may serve this directory itself (deploy/nginx/harness.conf): it is outside var/,
# which is the server's own.
STATIC_ROOT = BASE_DIR / "public" / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "agent.server.staticfiles.StaticStorage"},
}
WHITENOISE_MAX_AGE = 0  # a name without its hash: revalidated (ETag) on every use

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- Harness (README.md, "Configuration") ------------------------------------------------
ANTHROPIC_API_KEY = env_secret("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL")
HARNESS_MODEL = env_str("HARNESS_MODEL", DEFAULT_MODEL)
HARNESS_MAX_TOKENS = env_int("HARNESS_MAX_TOKENS", 4096, minimum=1)
HARNESS_MAX_TURNS = env_int("HARNESS_MAX_TURNS", 10, minimum=1)
HARNESS_THINKING = env_int("HARNESS_THINKING", 0, minimum=0)
if HARNESS_THINKING and not MIN_THINKING_BUDGET <= HARNESS_THINKING < HARNESS_MAX_TOKENS:
    raise ImproperlyConfigured(
        f"HARNESS_THINKING must be 0 or between {MIN_THINKING_BUDGET} and "
        f"HARNESS_MAX_TOKENS - 1 ({HARNESS_MAX_TOKENS - 1}), not {HARNESS_THINKING}"
    )
HARNESS_SYSTEM_PROMPT = env_str("HARNESS_SYSTEM_PROMPT")
# A file uploaded to a workspace (PUT /api/files/…, the page's upload), in MB.
HARNESS_MAX_UPLOAD_MB = env_int("HARNESS_MAX_UPLOAD_MB", 25, minimum=1)
# Each user's spend limit per calendar month (UTC) in USD; the admin overrides it per user.
HARNESS_MONTHLY_BUDGET_USD = env_amount("HARNESS_MONTHLY_BUDGET_USD")
# The share of the model's context window at which the history is compacted.
HARNESS_COMPACT_AT = env_fraction("HARNESS_COMPACT_AT", 0.8, minimum=0.1)
# Tool approval of conversations that chose none: auto, ask or read_only.
HARNESS_APPROVAL = env_choice("HARNESS_APPROVAL", APPROVAL_MODES, "auto")
HARNESS_WORKSPACES = Path(env_str("HARNESS_WORKSPACES", str(VAR_DIR / "workspaces")))
# Workspace storage (agent/server/storage.py): `loop` gives each workspace a size-limited ext4
# image of HARNESS_WORKSPACE_QUOTA_MB (needs root); `auto` uses it when it can.
HARNESS_WORKSPACE_STORAGE = env_choice("HARNESS_WORKSPACE_STORAGE", ("auto", "loop", "plain"),
                                       "auto")  # fmt: skip
HARNESS_WORKSPACE_QUOTA_MB = env_int("HARNESS_WORKSPACE_QUOTA_MB", 1024, minimum=8)
# /healthz fails when the database's, var/'s or the workspaces' disk has less free space.
HARNESS_MIN_FREE_MB = env_int("HARNESS_MIN_FREE_MB", 64, minimum=0)
HARNESS_BASH = env_choice("HARNESS_BASH", BASH_MODES, "sandbox")
# A root server gives user N's workspace and sandbox the uid BASE + N (its own, so the
# kernel's per-uid limits and permissions keep users apart). Pick a range no host account
# or container uses.
HARNESS_SANDBOX_UID_BASE = env_int("HARNESS_SANDBOX_UID_BASE", 200_000, minimum=1000)
# Privilege separation (agent/sandbox/): a server started as root starts a root broker and
# becomes this user before it serves; users' files and processes are reached only through
# the broker, as each user's own uid.
HARNESS_SERVICE_USER = env_str("HARNESS_SERVICE_USER", "harness")
# External CLI agents (agent/runs/cli_sessions.py): where each CLI is
# (else PATH), how long an unused tmux session lives, and the tmux server's socket.
HARNESS_AGENT_COMMANDS = {
    name: env_str(f"HARNESS_AGENT_{name.upper().replace('-', '_')}_COMMAND", "")
    for name in ("claude-code", "pi", "codex", "opencode")
}
HARNESS_AGENT_IDLE_MINUTES = env_int("HARNESS_AGENT_IDLE_MINUTES", 30, minimum=1)
HARNESS_AGENT_STATE = Path(env_str("HARNESS_AGENT_STATE", str(VAR_DIR / "cli-agents")))
# The Terminal panel: shells (tmux sessions) an owner keeps at once; one more ends the
# least recently used (agent/runs/terminals.py).
HARNESS_TERMINALS_PER_USER = env_int("HARNESS_TERMINALS_PER_USER", 4, minimum=1)
# Previews of what listens in a terminal's sandbox (agent/web/previews.py): connections one
# user may hold open at once, and the origin they are served from (empty: this one, with a
# sandboxing Content-Security-Policy).
HARNESS_PREVIEW_CONNECTIONS_PER_USER = env_int("HARNESS_PREVIEW_CONNECTIONS_PER_USER", 32,
                                               minimum=1)  # fmt: skip
HARNESS_PREVIEW_ORIGIN = (env_str("HARNESS_PREVIEW_ORIGIN", "") or "").rstrip("/")
if HARNESS_PREVIEW_ORIGIN:
    ALLOWED_HOSTS = [*ALLOWED_HOSTS, urlsplit(HARNESS_PREVIEW_ORIGIN).hostname or ""]
# What all of one user's sandboxed bash commands may hold at once (agent/core/tools/cgroups.py):
# enforced by cgroups where the host allows (`auto`; `required` refuses bash without them;
# `off`: rlimits only). HARNESS_CGROUP: the parent cgroup (default: the server's own, when
# delegated, + /harness).
HARNESS_SANDBOX_PIDS = env_int("HARNESS_SANDBOX_PIDS", 256, minimum=16)
HARNESS_SANDBOX_MEMORY_MB = env_int("HARNESS_SANDBOX_MEMORY_MB", 2048, minimum=64)
HARNESS_SANDBOX_CGROUPS = env_choice("HARNESS_SANDBOX_CGROUPS", ("auto", "required", "off"),
                                     "auto")  # fmt: skip
HARNESS_CGROUP = env_str("HARNESS_CGROUP", "")
if HARNESS_CGROUP and not HARNESS_CGROUP.startswith("/"):
    raise ImproperlyConfigured(
        f"HARNESS_CGROUP must be a cgroup path starting with '/', not {HARNESS_CGROUP!r}"
    )
HARNESS_SSE_HEARTBEAT = env_int("HARNESS_SSE_HEARTBEAT", 30, minimum=1)
# Live connections one user (signed in, or by API token) may hold at once in one server
# process: page WebSockets and API event streams together (agent/server/user_connections.py).
HARNESS_SOCKETS_PER_USER = env_int("HARNESS_SOCKETS_PER_USER", 32, minimum=1)
# Per-user quotas: prompt size, prompts started per minute, prompts running at once.
HARNESS_MAX_PROMPT_CHARS = env_int("HARNESS_MAX_PROMPT_CHARS", 100_000, minimum=1)
HARNESS_RUNS_PER_MINUTE = env_int("HARNESS_RUNS_PER_MINUTE", 10, minimum=1)
HARNESS_CONCURRENT_RUNS = env_int("HARNESS_CONCURRENT_RUNS", 2, minimum=1)
# Rate limits (agent/web/throttle.py). Sign-in: a username is locked out from one address
# after this many failures in a row, for the cool-off (django-axes, in the database, so it
# holds across processes; admins see and reset lockouts in /admin/). The API: an address
# that sent this many bad bearer tokens in a minute gets 429 for the rest of it. New
# conversations per user and hour (the page and the API).
HARNESS_LOGIN_FAILURES = env_int("HARNESS_LOGIN_FAILURES", 5, minimum=1)
HARNESS_LOGIN_COOLOFF_MINUTES = env_int("HARNESS_LOGIN_COOLOFF_MINUTES", 15, minimum=1)
HARNESS_API_TOKEN_FAILURES = env_int("HARNESS_API_TOKEN_FAILURES", 20, minimum=1)
HARNESS_CONVERSATIONS_PER_HOUR = env_int("HARNESS_CONVERSATIONS_PER_HOUR", 100, minimum=1)
AXES_FAILURE_LIMIT = HARNESS_LOGIN_FAILURES
AXES_COOLOFF_TIME = timedelta(minutes=HARNESS_LOGIN_COOLOFF_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # the pair, not either alone
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "agent.web.throttle.client_ip"
AXES_LOCKOUT_CALLABLE = "agent.web.throttle.login_locked_out"
AXES_WHITELIST_CALLABLE = "agent.web.throttle.proxy_sign_in"  # nothing to guess there
AXES_VERBOSE = False  # no start-up banner from every process and management command
# Sign-in by an authenticating proxy (agent/web/proxy_auth.py): the header naming the user,
# believed only on requests carrying the proxy's secret (X-Harness-Proxy-Secret).
HARNESS_TRUSTED_PROXY_HEADER = env_str("HARNESS_TRUSTED_PROXY_HEADER")
HARNESS_TRUSTED_PROXY_SECRET = env_secret("HARNESS_TRUSTED_PROXY_SECRET")
if HARNESS_TRUSTED_PROXY_HEADER is not None:
    if not re.fullmatch(r"[A-Za-z0-9-]{1,100}", HARNESS_TRUSTED_PROXY_HEADER):
        raise ImproperlyConfigured(
            "HARNESS_TRUSTED_PROXY_HEADER must be a header name (letters, digits, '-')"
        )
    if HARNESS_TRUSTED_PROXY_SECRET is None or len(HARNESS_TRUSTED_PROXY_SECRET) < 24:
        raise ImproperlyConfigured(
            "HARNESS_TRUSTED_PROXY_SECRET (or _FILE) of at least 24 characters is required "
            "with HARNESS_TRUSTED_PROXY_HEADER: the proxy sends it, so that no one else can "
            "name a user"
        )
    MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware")
                      + 1, "agent.web.proxy_auth.TrustedProxyUserMiddleware")  # fmt: skip
    AUTHENTICATION_BACKENDS.append("agent.web.proxy_auth.TrustedProxyUserBackend")
# Single sign-on by OpenID Connect (harness_site/sso.py, agent/web/oidc.py): off unless the
# HARNESS_OIDC_* variables are set, all of the required ones.
_OIDC = oidc_settings(debug=DEBUG)
HARNESS_OIDC = _OIDC.pop("HARNESS_OIDC", False)
if HARNESS_OIDC:
    globals().update(_OIDC)  # OIDC_RP_CLIENT_ID, OIDC_OP_TOKEN_ENDPOINT, … (sso.py lists them)
    INSTALLED_APPS.insert(INSTALLED_APPS.index("axes"), "mozilla_django_oidc")
    AUTHENTICATION_BACKENDS.append("agent.web.oidc.OIDCBackend")
# /metrics (agent/web/prometheus.py) answers only this bearer token; unset: no /metrics.
HARNESS_METRICS_TOKEN = env_secret("HARNESS_METRICS_TOKEN")
if HARNESS_METRICS_TOKEN is not None and len(HARNESS_METRICS_TOKEN) < 24:
    raise ImproperlyConfigured("HARNESS_METRICS_TOKEN must be at least 24 characters")
# Git credentials (agent/runs/git_credentials.py) are encrypted with a key derived from this
# secret (HKDF-SHA256); unset, from DJANGO_SECRET_KEY (changing that then makes stored
# credentials unreadable: users enter them again).
HARNESS_CREDENTIALS_KEY = env_secret("HARNESS_CREDENTIALS_KEY")
if HARNESS_CREDENTIALS_KEY is not None and len(HARNESS_CREDENTIALS_KEY) < 32:
    raise ImproperlyConfigured("HARNESS_CREDENTIALS_KEY must be at least 32 characters")
# Hosts sandboxed traffic may reach (agent/core/egress_rules.py): `host`, `host:port` or
# `*.domain`. A loopback, private or link-local address needs a rule naming it exactly.
try:
    HARNESS_EGRESS_ALLOW = parse_rules(env_str("HARNESS_EGRESS_ALLOW", "") or "")
except BadRule as exc:
    raise ImproperlyConfigured(f"HARNESS_EGRESS_ALLOW: {exc}") from None
# The network policy for sandboxes (agent/egress/): `off`, no network; `proxy`, only through
# the egress proxy, which admits what the rules allow and bounds each user's bytes a day.
HARNESS_EGRESS = env_choice("HARNESS_EGRESS", ("off", "proxy"), "off")
HARNESS_EGRESS_MB_PER_DAY = env_int("HARNESS_EGRESS_MB_PER_DAY", 1024, minimum=1)
# Open connections one conversation's sandboxes may hold through the proxy at once.
HARNESS_EGRESS_CONNECTIONS = env_int("HARNESS_EGRESS_CONNECTIONS", 32, minimum=1)
# ...and all of one user's conversations together, so one user's many downloads cannot
# take every connection this process has from the others.
HARNESS_EGRESS_CONNECTIONS_PER_USER = env_int("HARNESS_EGRESS_CONNECTIONS_PER_USER", 64,
                                              minimum=1)  # fmt: skip
# Rows of the Egress log kept; the oldest are deleted past it.
HARNESS_EGRESS_LOG_ROWS = env_int("HARNESS_EGRESS_LOG_ROWS", 100_000, minimum=100)
# A git clone, fetch or push through the relay (agent/runs/git_relay.py): its time and the
# bytes it may move each way.
HARNESS_GIT_TIMEOUT = env_int("HARNESS_GIT_TIMEOUT", 600, minimum=10)
HARNESS_GIT_MAX_MB = env_int("HARNESS_GIT_MAX_MB", 1024, minimum=1)
# Seconds a run's lease lasts; its process renews it every third of that.
HARNESS_RUN_LEASE = env_int("HARNESS_RUN_LEASE", 30, minimum=2)

# -- Production transport security (DJANGO_DEBUG not 1) ------------------------------------
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", True)
    # Behind a TLS-terminating proxy, it sets X-Forwarded-Proto and may redirect itself.
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    if not KEYLESS and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 50 random characters")

# -- Logging: level and format by environment; ids on records; secrets masked -------------
HARNESS_LOG_LEVEL = env_choice("HARNESS_LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR"),
                               "INFO" if DEBUG else "WARNING")  # fmt: skip
HARNESS_LOG_FORMAT = env_choice("HARNESS_LOG_FORMAT", ("text", "json"), "text")
# Masked wherever they appear in a record, traceback included (agent/server/logs.py).
_LOG_SECRETS = tuple(
    str(value)
    for value in (SECRET_KEY, ANTHROPIC_API_KEY, HARNESS_METRICS_TOKEN, HARNESS_CREDENTIALS_KEY,
                  HARNESS_TRUSTED_PROXY_SECRET, _OIDC.get("OIDC_RP_CLIENT_SECRET"),
                  DATABASES["default"].get("PASSWORD"),
                  urlsplit(REDIS_URL).password if REDIS_URL else None)
    if value
)  # fmt: skip
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "agent.server.logs.ContextFilter"}},
    "formatters": {
        "text": {
            "()": "agent.server.logs.TextFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s: %(message)s",
            "secrets": _LOG_SECRETS,
        },
        "json": {"()": "agent.server.logs.JsonFormatter", "secrets": _LOG_SECRETS},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": HARNESS_LOG_FORMAT,
        }
    },
    "root": {"handlers": ["console"], "level": HARNESS_LOG_LEVEL},
    # DEBUG is for the app's own records. Below INFO, markdown-it traces every block rule
    # it tries on every line (gigabytes an hour, and the CPU to format them) and the SDK
    # logs each request's whole body (every user's prompts, files and system prompt).
    "loggers": {
        name: {"level": max(logging.getLevelName(HARNESS_LOG_LEVEL), logging.INFO)}
        for name in ("markdown_it", "anthropic")
    },
}
