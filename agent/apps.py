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
