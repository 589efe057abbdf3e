from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Harness agent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agent import audit  # noqa: F401 - connects the audit log's signal receivers
        from agent.server.dbfile import secure_at_startup
        from agent.web import revocation  # noqa: F401 - connects the signal receivers

        secure_at_startup()  # the SQLite file 0600 before anything connects (server/dbfile.py)
        from agent.server.storage import check_at_startup

        check_at_startup()  # an impossible HARNESS_WORKSPACE_STORAGE stops start-up
        from agent.runs.sandbox import check_at_startup as check_sandbox

        check_sandbox()  # logs what the bash sandbox's limits rest on (cgroups or rlimits)
        _check_channels_redis()


def _check_channels_redis() -> None:
    """With REDIS_URL, the channel layer reads channels-redis's private internals: stop
    start-up with the installed version named if they are not all there."""
    from django.conf import settings

    if settings.CHANNEL_LAYERS["default"]["BACKEND"] != "agent.server.layers.RedisLayer":
        return
    import importlib.metadata

    from django.core.exceptions import ImproperlyConfigured

    from agent.server.layers import missing_internals

    missing = missing_internals()
    if missing:
        version = importlib.metadata.version("channels-redis")
        raise ImproperlyConfigured(
            f"channels-redis {version} is not the version agent/server/layers.py was written "
            f"for (4.3.x): it lacks {', '.join(missing)}. Install the pinned version "
            "(pip install --require-hashes -r requirements.lock)."
        )
