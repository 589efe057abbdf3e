from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from agent.web import (
    api,
    choices,
    file_views,
    files_api,
    health,
    llm,
    oidc,
    organize,
    previews,
    remote_api,
    uploads,
    views,
)

urlpatterns = [
    path("", views.home, name="home"),
    path("c/new/", views.create_conversation, name="create_conversation"),
    path("c/<uuid:conversation_id>/", views.conversation_page, name="conversation"),
    path("c/<uuid:conversation_id>/earlier", views.earlier_parts, name="earlier_parts"),
    path("c/<uuid:conversation_id>/list", organize.conversation_list, name="conversation_list"),
    path("c/<uuid:conversation_id>/pin", organize.set_pinned, name="set_pinned"),
    path("c/<uuid:conversation_id>/archive", organize.set_archived, name="set_archived"),
    path(
        "c/<uuid:conversation_id>/instructions", organize.set_instructions, name="set_instructions"
    ),
    path("c/<uuid:conversation_id>/rename", views.rename_conversation, name="rename"),
    path("c/<uuid:conversation_id>/delete", views.delete_conversation, name="delete"),
    path("c/<uuid:conversation_id>/model", choices.set_model, name="set_model"),
    path("c/<uuid:conversation_id>/thinking", choices.set_thinking, name="set_thinking"),
    path("c/<uuid:conversation_id>/approval", choices.set_approval, name="set_approval"),
    path("c/<uuid:conversation_id>/share", views.share, name="share"),
    path(
        "c/<uuid:conversation_id>/export.md",
        file_views.export_conversation,
        {"extension": "md"},
        name="export_md",
    ),  # fmt: skip
    path(
        "c/<uuid:conversation_id>/export.json",
        file_views.export_conversation,
        {"extension": "json"},
        name="export_json",
    ),  # fmt: skip
    path("c/<uuid:conversation_id>/files/", file_views.workspace_files, name="conversation_files"),
    path("c/<uuid:conversation_id>/files/download", file_views.download_file, name="download_file"),
    re_path(
        r"^c/(?P<conversation_id>[0-9a-f-]{36})/images/(?P<sha256>[0-9a-f]{64})$",
        file_views.conversation_image,
        name="conversation_image",
    ),
    path("files/", file_views.workspace_files, name="files"),
    # Any name at all reaches the view (a newline too), which refuses the bad ones with 400.
    re_path(r"^files/upload/(?P<name>(?s:.+))$", uploads.upload, name="upload"),
    path("account/theme", views.set_theme, name="set_theme"),
    path("api/conversations", api.conversations, name="api_conversations"),
    path("api/usage", api.usage_view, name="api_usage"),
    path("api/agents", api.agents_view, name="api_agents"),
    path("api/files/", files_api.files, name="api_files_root"),
    path("api/files/<path:path>", files_api.files, name="api_files"),
    path("api/search", api.search_view, name="api_search"),
    path("api/projects", api.projects_view, name="api_projects"),
    path("api/projects/<uuid:project_id>", api.project_view, name="api_project"),
    path(
        "api/conversations/<uuid:conversation_id>/checkpoints",
        api.checkpoints_view,
        name="api_checkpoints",
    ),
    path("api/conversations/<uuid:conversation_id>/restore", api.restore_view, name="api_restore"),
    path("api/conversations/<uuid:conversation_id>/changes", api.changes_view, name="api_changes"),
    path("api/conversations/<uuid:conversation_id>/commit", api.commit_view, name="api_commit"),
    path("api/conversations/<uuid:conversation_id>/archive", api.archive_view, name="api_archive"),
    path("api/credentials/git", remote_api.git_credentials_view, name="api_git_credentials"),
    path("api/credentials/git/<str:host>", remote_api.git_credential, name="api_git_credential"),
    path("api/conversations/<uuid:conversation_id>/push", remote_api.push, name="api_push"),
    path("search", views.search_view, name="search"),
    path("api/conversations/<uuid:conversation_id>/ports", previews.ports_view, name="api_ports"),
    re_path(r"^preview/(?P<rest>(?s:.*))$", previews.preview, name="preview"),
    path("api/conversations/<uuid:conversation_id>", api.conversation, name="api_conversation"),
    path("api/conversations/<uuid:conversation_id>/events", api.events, name="api_events"),
    path("api/conversations/<uuid:conversation_id>/prompt", api.prompt, name="api_prompt"),
    path("api/conversations/<uuid:conversation_id>/cancel", api.cancel, name="api_cancel"),
    path("api/conversations/<uuid:conversation_id>/compact", api.compact, name="api_compact"),
    path("api/conversations/<uuid:conversation_id>/members", api.members, name="api_members"),
    path(
        "api/conversations/<uuid:conversation_id>/regenerate",
        api.regenerate_view,
        name="api_regenerate",
    ),
    path(
        "api/conversations/<uuid:conversation_id>/branches", api.branches_view, name="api_branches"
    ),
    path(
        "api/conversations/<uuid:conversation_id>/branches/<int:branch>/activate",
        api.activate_branch,
        name="api_activate_branch",
    ),
    path("api/conversations/<uuid:conversation_id>/fork", api.fork_view, name="api_fork"),
    path("c/<uuid:conversation_id>/fork", views.fork_conversation, name="fork"),
    path(
        "api/conversations/<uuid:conversation_id>/members/<str:username>",
        api.member,
        name="api_member",
    ),  # fmt: skip
    path(
        "api/conversations/<uuid:conversation_id>/queue/<str:queue_id>",
        api.unqueue,
        name="api_unqueue",
    ),  # fmt: skip
    path(
        "api/conversations/<uuid:conversation_id>/approvals/<str:call_id>",
        api.approval,
        name="api_approval",
    ),  # fmt: skip
    path("healthz", health.healthz, name="healthz"),
    path("llm/anthropic/<path:rest>", llm.anthropic, name="llm_anthropic"),
    path("llm/openai/<path:rest>", llm.openai, name="llm_openai"),
    path("accounts/login/", oidc.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on (agent/web/oidc.py): 404 unless HARNESS_OIDC_* configure it. The
    # provider sends the browser back to /oidc/callback/ (the redirect URI to register).
    path("oidc/authenticate/", oidc.authenticate, name="oidc_authentication_init"),
    path("oidc/callback/", oidc.callback, name="oidc_authentication_callback"),
    path("admin/", admin.site.urls),
]
