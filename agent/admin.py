"""The Django admin: users, conversations with their full transcripts, events, API tokens,
the deployment's instructions for the agent, usage and the audit log."""

from __future__ import annotations

import datetime
import json
import zipfile
from io import BytesIO

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path

from agent.access import actable_by, may_act_as
from agent.core.events import USAGE_FIELDS
from agent.models import (
    ApiToken,
    AuditEntry,
    Conversation,
    DeploymentInstructions,
    EgressLog,
    EgressRule,
    Event,
    GitCredential,
    Membership,
    ProxyIdentity,
    UsageDay,
    User,
)
from agent.runs import usage
from agent.runs.eventlog import from_stored
from agent.ui import usage_chart
from agent.ui.bidi import bidi_visible
from agent.ui.export import conversation_json, conversation_markdown, conversation_meta
from agent.ui.transcript import answer_ends, build_parts
from agent.web import api_tokens as tokens
from agent.web.api_tokens import digest, new_token_value


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    fieldsets = (*BaseUserAdmin.fieldsets, ("Harness", {"fields": (
        "bash_enabled", "monthly_budget_usd", "month_to_date", "prompt_history_list",
    )}))  # fmt: skip
    readonly_fields = ("prompt_history_list", "month_to_date")

    @admin.display(description="Spent this month (UTC)")
    def month_to_date(self, user: User):
        return f"${usage.month_to_date(user.pk):.2f}" if user.pk else "—"

    list_display = ("username", "email", "is_active", "is_staff", "date_joined", "last_login")

    @admin.display(description="Prompt history (oldest first)")
    def prompt_history_list(self, user: User):
        if not user.prompt_history:
            return "—"
        return render_to_string("admin/agent/_prompt_history.html",
                                {"prompts": user.prompt_history})  # fmt: skip


_meta = conversation_meta


def _events(conversation: Conversation) -> list[dict]:
    """The stored events' wire JSON (what the JSON export holds)."""
    return list(conversation.events.order_by("seq").values_list("payload", flat=True))


def _export(queryset, extension: str, render) -> HttpResponse:
    conversations = list(queryset.select_related("owner"))
    if len(conversations) == 1:
        conversation = conversations[0]
        body = render(_meta(conversation), _events(conversation))
        kind = "text/markdown" if extension == "md" else "application/json"
        response = HttpResponse(body, content_type=f"{kind}; charset=utf-8")
        name = f"conversation-{conversation.id}.{extension}"
    else:
        buffer = BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for conversation in conversations:
                archive.writestr(f"conversation-{conversation.id}.{extension}",
                                 render(_meta(conversation), _events(conversation)))  # fmt: skip
        response = HttpResponse(buffer.getvalue(), content_type="application/zip")
        name = f"conversations-{extension}.zip"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@admin.action(description="Export as Markdown")
def export_markdown(modeladmin, request, queryset):
    return _export(queryset, "md", conversation_markdown)


@admin.action(description="Export as JSON")
def export_json(modeladmin, request, queryset):
    return _export(queryset, "json", conversation_json)


class MembershipInline(admin.TabularInline):
    """Who the owner shared it with. Read-only here: sharing is the owner's,
    through agent/web/sharing.py, which also closes the connections of those who lose it."""

    model = Membership
    fields = readonly_fields = ("user", "role", "created")
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    inlines = (MembershipInline,)
    list_display = ("__str__", "owner", "model", "agent", "state", "input_tokens",
                    "output_tokens", "cost_usd", "created", "updated")  # fmt: skip
    list_filter = ("state", "model", "agent", "pinned", "archived", "owner", "created", "updated")
    search_fields = ("title", "owner__username", "id")
    list_select_related = ("owner",)
    date_hierarchy = "created"
    actions = (export_markdown, export_json)
    readonly_fields = ("id", "owner", "model", "state", "team", "created", "updated", "last_seq",
                       *USAGE_FIELDS, "cost_usd", "transcript")  # fmt: skip
    fields = ("title", "instructions", "pinned", "archived", *readonly_fields)

    def has_add_permission(self, request):
        return False  # conversations are made by their owners, not by admins

    def save_model(self, request, obj, form, change):
        # Only the fields edited: a whole save sets ``updated``, the conversation's last
        # activity, which orders its owner's list.
        obj.save(update_fields=[name for name in form.changed_data if name in self.fields])

    @admin.display(description="Transcript")
    def transcript(self, conversation: Conversation):
        parts = build_parts(from_stored(_events(conversation)))
        context = {"parts": parts, "conversation": conversation, "answer_ends": answer_ends(parts)}
        return render_to_string("admin/agent/transcript.html", context)


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ("conversation", "seq", "type", "summary", "created")
    list_filter = ("type", "created", "conversation__owner")
    search_fields = ("payload", "conversation__title", "conversation__owner__username")
    list_select_related = ("conversation",)
    readonly_fields = ("conversation", "seq", "type", "pretty_payload", "created")
    exclude = ("payload",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # the event log is append-only

    @admin.display(description="Summary")
    def summary(self, event: Event) -> str:
        payload = event.payload or {}
        text = payload.get("content") or payload.get("message") or payload.get("name") or ""
        return bidi_visible(str(text)[:100])  # (names and paths from a workspace among them)

    @admin.display(description="Payload")
    def pretty_payload(self, event: Event):
        payload = json.dumps(event.payload, indent=2, ensure_ascii=False)
        return render_to_string("admin/agent/_payload.html", {"payload": bidi_visible(payload)})


@admin.action(description="Revoke selected tokens")
def revoke_tokens(modeladmin, request, queryset):
    # Through the one revocation function: it also ends the tokens' open event streams.
    count = tokens.revoke_tokens(queryset)
    messages.success(request, f"Revoked {count} token(s).")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "created", "last_used", "revoked")
    list_filter = ("revoked", "created")
    search_fields = ("user__username", "name", "prefix")
    list_select_related = ("user",)
    actions = (revoke_tokens,)
    readonly_fields = ("prefix", "created", "last_used")

    def get_fields(self, request, obj=None):
        return ("user", "name") if obj is None else ("user", "name", *self.readonly_fields,
                                                     "revoked")  # fmt: skip

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else ("user", *self.readonly_fields)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        # A token acts as its user: offered (and accepted) only for the accounts the
        # requester may act as, not every account a staff member who may add tokens names.
        if db_field.name == "user":
            kwargs["queryset"] = actable_by(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change and not may_act_as(request.user, obj.user):
            raise PermissionDenied  # (the form's choices already exclude them)
        if not change:  # a new token: generated here and shown this once
            token = new_token_value()
            obj.key_hash, obj.prefix = digest(token), token[:10]
            super().save_model(request, obj, form, change)
            messages.warning(
                request,
                f"New API token for {obj.user.username}: {token} "
                "(copy it now; it is not stored and will not be shown again)",
            )
            return
        super().save_model(request, obj, form, change)


@admin.register(ProxyIdentity)
class ProxyIdentityAdmin(admin.ModelAdmin):
    """Accounts the authenticating proxy may sign in as (agent/web/proxy_auth.py): those it
    made, and those linked here. A link lets whoever the proxy names so act as the account,
    so it is made only for accounts the requester may act as (a superuser's by a
    superuser), like an API token; linked or unlinked, never changed."""

    list_display = ("user", "created")
    search_fields = ("user__username",)
    list_select_related = ("user",)
    fields = ("user",)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user":
            kwargs["queryset"] = actable_by(request.user).filter(proxy_identity__isnull=True)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        if not may_act_as(request.user, obj.user):
            raise PermissionDenied  # (the form's choices already exclude them)
        super().save_model(request, obj, form, change)


@admin.register(DeploymentInstructions)
class DeploymentInstructionsAdmin(admin.ModelAdmin):
    """One row: added once, then edited; never deleted (an empty text means none)."""

    fields = ["text", "updated"]
    readonly_fields = ["updated"]

    def has_add_permission(self, request) -> bool:
        return super().has_add_permission(request) and not DeploymentInstructions.objects.exists()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """A record the application writes and the admin only reads."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(GitCredential)
class GitCredentialAdmin(ReadOnlyAdmin):
    """Which users hold a git credential for which host: never the token (not a field here,
    not even sealed); users replace or remove their own through the API."""

    fields = list_display = ["user", "host", "username", "created", "updated"]
    list_filter = ["host"]
    search_fields = ["user__username", "host"]


@admin.register(UsageDay)
class UsageDayAdmin(ReadOnlyAdmin):
    """Each user's tokens and cost per day, as the event log's writer adds them (read-only)."""

    list_display = ["date", "user", "cost_usd", "input_tokens", "output_tokens"]
    list_filter = ["date", "user"]
    date_hierarchy = "date"
    ordering = ["-date", "user__username"]

    def get_urls(self):
        # admin_view: staff only (anyone else gets the admin's login), like every admin page.
        return [
            path("chart/", self.admin_site.admin_view(self.chart_view), name="usage_chart"),
            path("chart.csv", self.admin_site.admin_view(self.csv_view), name="usage_csv"),
            *super().get_urls(),
        ]

    def _rows(self) -> tuple[list[usage_chart.Row], list]:
        today = datetime.datetime.now(datetime.UTC).date()
        days = usage_chart.days_back(today, CHART_DAYS)
        return [usage_chart.Row(*row) for row in usage.team_days(days[0])], days

    def _check_viewer(self, request) -> None:
        # Every user's spend: for those the admin lets read the usage list (its view
        # permission), not for any staff member (admin_view checks staff only).
        if not self.has_view_permission(request):
            raise PermissionDenied

    def chart_view(self, request):
        self._check_viewer(request)
        rows, days = self._rows()
        context = {
            **self.admin_site.each_context(request),
            "title": f"Usage, last {CHART_DAYS} days (UTC)",
            "opts": self.model._meta,
            "charts": [
                usage_chart.chart(rows, days, "cost_usd", "Cost (USD) per user per day"),
                usage_chart.chart(rows, days, "tokens", "Tokens (in + out) per user per day"),
            ],
            "rows": rows,
        }
        return TemplateResponse(request, "admin/agent/usage_chart.html", context)

    def csv_view(self, request):
        self._check_viewer(request)
        rows, days = self._rows()
        response = HttpResponse(usage_chart.to_csv(rows), content_type="text/csv; charset=utf-8")
        name = f"harness-usage-{days[0].isoformat()}-{days[-1].isoformat()}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response


CHART_DAYS = 30


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Sign-ins, failed ones and lockouts, API tokens made and revoked, shares and budget
    changes (``agent/audit.py``): read, never written, here."""

    list_display = ["time", "action", "actor_name", "target", "ip"]
    list_filter = ["action"]
    search_fields = ["actor_name", "target", "ip"]
    date_hierarchy = "time"
    readonly_fields = ["time", "action", "actor", "actor_name", "target", "ip", "details"]


@admin.register(EgressRule)
class EgressRuleAdmin(admin.ModelAdmin):
    """Hosts sandboxes may reach through the egress proxy and the git relay, for everyone or
    one user."""

    list_display = ["host", "ports", "user", "created"]
    search_fields = ["host", "user__username"]
    autocomplete_fields = ["user"]


@admin.register(EgressLog)
class EgressLogAdmin(ReadOnlyAdmin):
    """Every connection the egress proxy, and git operation the git relay, admitted or
    refused: read, never written, here."""

    list_display = ["time", "user", "conversation", "host", "port", "allowed", "bytes_up",
                    "bytes_down", "reason"]  # fmt: skip
    list_filter = ["allowed"]
    search_fields = ["host", "user__username", "reason"]
    date_hierarchy = "time"
