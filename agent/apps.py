from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Harness agent"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import revocation  # noqa: F401 - connects the signal receivers
