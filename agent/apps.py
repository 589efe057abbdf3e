from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent"
    verbose_name = "Harness agent"
    default_auto_field = "django.db.models.BigAutoField"
