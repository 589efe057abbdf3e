"""Database models. The custom user model is here from the first migration on."""

from __future__ import annotations

import uuid

from django.contrib.auth.models import AbstractUser
from django.db import models

from agent.core.config import APPROVAL_MODES, THINKING_LEVELS

PROMPT_HISTORY_LIMIT = 100


class User(AbstractUser):
    class Theme(models.TextChoices):
        SYSTEM = "system", "System"  # follows the browser's prefers-color-scheme
        LIGHT = "light", "Light"
        DARK = "dark", "Dark"

    # Newest last, at most 100, FIFO, never two equal neighbours: what ↑/↓ walk in the page.
    prompt_history = models.JSONField(default=list, blank=True)
    bash_enabled = models.BooleanField(
        default=True, help_text="Let the agent run bash (in the sandbox) for this user."
    )
    # The page's colours, rendered into <html data-theme> on every page (no flash).
    theme = models.CharField(max_length=6, choices=Theme.choices, default=Theme.SYSTEM)

    monthly_budget_usd = models.DecimalField(
        max_digits=10, decimal_places=2, null=True, blank=True,
        help_text="This user's spend limit per calendar month (UTC), in USD. Empty: the "
        "deployment's HARNESS_MONTHLY_BUDGET_USD (unset there: no limit).",
    )  # fmt: skip

    # The per-minute prompt limit's counter (agent/runs/rate.py): prompts sent in the
    # one-minute window ``rate_window`` (minutes since the epoch) and in the one before it.
    rate_window = models.BigIntegerField(default=0, editable=False)
    rate_count = models.PositiveIntegerField(default=0, editable=False)
    rate_previous = models.PositiveIntegerField(default=0, editable=False)

    def remember_prompt(self, prompt: str) -> None:
        history = list(self.prompt_history or [])
        if not history or history[-1] != prompt:
            history.append(prompt)
        self.prompt_history = history[-PROMPT_HISTORY_LIMIT:]


class Project(models.Model):
    """A git repository a user owns (docs/API.md, "Projects"): cloned, empty, or unpacked
    from an archive. Its bare repository and its conversations' worktrees live in the
    owner's workspace storage (their quota), touched only from the owner's sandbox."""

    class State(models.TextChoices):
        CLONING = "cloning"
        READY = "ready"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=200)
    git_url = models.CharField(max_length=2000, blank=True)  # "": made empty or unpacked
    default_branch = models.CharField(max_length=255, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.CLONING)
    error = models.TextField(blank=True)  # git's message when it failed (never a credential)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        indexes = [models.Index(fields=["owner", "-created"], name="project_owner_created")]

    def __str__(self) -> str:
        return self.name


class Conversation(models.Model):
    class State(models.TextChoices):
        IDLE = "idle"
        RUNNING = "running"
        ERROR = "error"  # the last prompt ended in an error
        INTERRUPTED = "interrupted"  # the server stopped while a prompt ran

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=100)
    # The thinking level ("": the deployment's HARNESS_THINKING budget).
    thinking = models.CharField(max_length=10, blank=True, default="",
                                choices=[(level, level) for level in THINKING_LEVELS])  # fmt: skip
    # Tool approval (docs/API.md, "Approvals"; "": the deployment's HARNESS_APPROVAL).
    approval = models.CharField(max_length=10, blank=True, default="",
                                choices=[(mode, mode) for mode in APPROVAL_MODES])  # fmt: skip
    state = models.CharField(max_length=20, choices=State.choices, default=State.IDLE)
    # Who answers: "harness", the built-in loop, or an external CLI agent.
    agent = models.CharField(max_length=20, default="harness")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    # The highest seq handed out so far; the next event gets last_seq + 1 (never reused).
    last_seq = models.PositiveBigIntegerField(default=0)
    # The API message history the agent continues from (the event log is what people see).
    history = models.JSONField(default=list, blank=True)
    # The process running the prompt renews this lease; when it lapses the process is
    # presumed dead and the run is marked interrupted (agent/runs/recovery.py).
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_input_tokens = models.PositiveBigIntegerField(default=0)
    cache_creation_input_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    # How full the model's context is: the last call's input (or a compaction's estimate).
    context_tokens = models.PositiveIntegerField(default=0)
    context_window = models.PositiveIntegerField(default=0)
    # Open to every active user of the deployment, read-only (docs/API.md, "Sharing").
    team = models.BooleanField(default=False)
    # The branch shown and continued (docs/API.md, "Branches and forks"; 0: the first).
    # ``history`` is its head's; the others' are kept on their Branch rows.
    active_branch = models.PositiveIntegerField(default=0)
    # A conversation in a project works in a git worktree of its own, on ``branch``
    # (harness/<8 hex>) made from ``base_commit``; without one, in its owner's workspace.
    # Deleting the project keeps the transcript.
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="conversations")  # fmt: skip
    branch = models.CharField(max_length=255, blank=True)
    base_commit = models.CharField(max_length=64, blank=True)
    # Added to this conversation's system prompt, after the workspace's AGENTS.md (its
    # owner and collaborators edit it: PATCH {"instructions"}; bounded, INSTRUCTIONS_MAX).
    instructions = models.TextField(blank=True, default="")
    # The owner's list: pinned ones first, archived ones only behind the list's filter.
    pinned = models.BooleanField(default=False)
    archived = models.BooleanField(default=False)

    class Meta:
        ordering = ["-updated"]
        indexes = [
            # The sidebar and `/`: a user's conversations, newest first.
            models.Index(fields=["owner", "-updated"], name="conv_owner_updated"),
            # Admin filters and start-up recovery: conversations in a given state.
            models.Index(fields=["state"], name="conv_state"),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {str(self.id)[:8]}"

    @property
    def display_title(self) -> str:
        return self.title or "New conversation"


class Membership(models.Model):
    """A user the owner shared a conversation with, and what they may do (docs/API.md,
    "Conventions"): a viewer reads it live; a collaborator also prompts, queues, cancels and
    approves (in the owner's workspace, on the owner's budget). agent/access.py reads
    these."""

    class Role(models.TextChoices):
        VIEWER = "viewer"
        COLLABORATOR = "collaborator"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE,
                                     related_name="memberships")  # fmt: skip
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=12, choices=Role.choices)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "user"], name="membership_once")
        ]
        # "Shared with me": a user's memberships.
        indexes = [models.Index(fields=["user"], name="membership_user")]

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) on {self.conversation}"


class DeploymentInstructions(models.Model):
    """Instructions for the agent in every conversation of this deployment (the system
    prompt's layer before a workspace's AGENTS.md): one row, edited by staff in the admin."""

    text = models.TextField(
        blank=True,
        help_text="Added to every run's system prompt, after the built-in identity and before "
        "the workspace's AGENTS.md. Keep it short: it costs tokens on every model call.",
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = verbose_name_plural = "deployment instructions"

    def __str__(self) -> str:
        return "Deployment instructions"

    def save(self, *args, **kwargs) -> None:
        self.pk = 1  # the one row
        super().save(*args, **kwargs)

    @classmethod
    def current(cls) -> str:
        row = cls.objects.filter(pk=1).only("text").first()
        return row.text if row else ""


class UsageDay(models.Model):
    """One user's tokens and cost on one day (UTC), added to as usage events are stored: a
    budget check and the usage figures read a month's rows, never the event log."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="usage_days")
    date = models.DateField()
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "date"], name="usage_user_date")]
        ordering = ["date"]

    def __str__(self) -> str:
        return f"{self.user} {self.date}"


class SearchEntry(models.Model):
    """A prompt or an answer of a conversation, for full-text search (`GET /api/search`): added
    as its event is stored. The text index is the database's own (migration 0009): a GIN
    index on PostgreSQL, an FTS5 table kept in step by triggers on SQLite."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE,
                                     related_name="search_entries")  # fmt: skip
    seq = models.PositiveBigIntegerField()
    text = models.TextField()

    class Meta:
        indexes = [models.Index(fields=["conversation", "seq"], name="search_conv_seq")]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.seq}"


class Event(models.Model):
    """One event of a conversation (docs/API.md, "Events"), append-only. ``payload`` is the
    event's wire JSON."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=20)
    payload = models.JSONField()
    # The branch it was stored on (docs/API.md, "Branches and forks"; 0: the first line).
    # Never changed.
    branch = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "seq"]
        constraints = [
            # Also the index for "events of a conversation after seq N" (page, replay, SSE).
            models.UniqueConstraint(fields=["conversation", "seq"], name="event_unique_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"


class Attachment(models.Model):
    """An image attached to a prompt: a snapshot of the workspace file's
    bytes when the prompt was sent, kept with the conversation (the file may change or go;
    the model and the page must see what was sent). The history and the ``user`` event
    name it by sha256 (agent/core/images.py); a fork gets copies of its own."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE,
                                     related_name="attachments")  # fmt: skip
    sha256 = models.CharField(max_length=64)
    media_type = models.CharField(max_length=20)
    size = models.PositiveIntegerField()
    data = models.BinaryField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["conversation", "sha256"], name="attachment_once")
        ]

    def __str__(self) -> str:
        return f"{self.media_type} {self.sha256[:12]}"


class Branch(models.Model):
    """A line of the conversation that parts from another (docs/API.md, "Branches and
    forks"): an edited prompt or an answer given again. Its path is its parent's events up
    to ``fork_seq``, then its own. No row exists until a conversation first branches (then
    one for the first line too, number 0). agent/runs/branches.py reads and writes these."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE,
                                     related_name="branches")  # fmt: skip
    number = models.PositiveIntegerField()
    parent = models.PositiveIntegerField(null=True, blank=True)
    fork_seq = models.PositiveBigIntegerField(default=0)
    # The model's history at this branch's head, while another branch is active.
    history = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "number"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "number"], name="branch_once")
        ]

    def __str__(self) -> str:
        return f"branch {self.number} (from #{self.fork_seq})"


class ApiToken(models.Model):
    """A bearer token for the HTTP API. Only its SHA-256 is stored; the token is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    # Lookups by hash on every API request.
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False)  # to recognise it in lists
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user.username}{', revoked' if self.revoked else ''})"


class AuditEntry(models.Model):
    """One line of the audit log: sign-ins and their failures, API tokens made
    and revoked, shares, budget changes. Written by ``agent.audit.record``, never edited."""

    class Action(models.TextChoices):
        SIGN_IN = "sign_in", "Signed in"
        SIGN_IN_FAILED = "sign_in_failed", "Sign-in failed"
        LOCKED_OUT = "locked_out", "Locked out (too many failed sign-ins)"
        SIGN_OUT = "sign_out", "Signed out"
        TOKEN_CREATED = "token_created", "API token created"
        TOKEN_REVOKED = "token_revoked", "API token revoked"
        MEMBER_ADDED = "member_added", "Shared with a user"
        MEMBER_CHANGED = "member_changed", "A member's role changed"
        MEMBER_REMOVED = "member_removed", "A member removed"
        TEAM_OPENED = "team_opened", "Opened to the team"
        TEAM_CLOSED = "team_closed", "Closed to the team"
        BUDGET_CHANGED = "budget_changed", "Budget changed"

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=20, choices=Action.choices, db_index=True)
    # Who did it (none: a failed sign-in, a management command); the name is kept when the
    # account is deleted.
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")  # fmt: skip
    actor_name = models.CharField(max_length=150, blank=True)
    target = models.CharField(max_length=300, blank=True)  # what it was done to
    ip = models.GenericIPAddressField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-time"]
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.action} {self.actor_name} {self.target}"


class OidcIdentity(models.Model):
    """The account an OpenID Connect identity signs in as (agent/web/oidc.py): the
    provider's issuer and subject, which never change, unlike the name the account was
    given from a claim at its first sign-in. Only accounts made by single sign-on have one,
    so a claim that happens to equal a local account's name never signs in as it."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="oidc_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="oidc_identity_unique"),
        ]
        verbose_name = "OpenID Connect identity"

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} → {self.user.username}"


class ProxyIdentity(models.Model):
    """An account that sign-in by the authenticating proxy (agent/web/proxy_auth.py) may
    sign in as, by its username: one the proxy's sign-in made, or one an administrator who
    may act as it linked here. Only these: a name the proxy sends that equals a local
    account's (``root``) signs in no one, as OpenID Connect's ``OidcIdentity`` keeps it."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="proxy_identity")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "proxy sign-in link"

    def __str__(self) -> str:
        return f"proxy sign-in as {self.user.username}"


class GitCredential(models.Model):
    """A user's credential for one git host (``host`` or ``host:port``), used by the server
    for that user's clones, fetches and pushes. The token is encrypted at rest and never
    shown again, to anyone; no sandboxed process ever holds it."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="git_credentials")
    host = models.CharField(max_length=255)
    username = models.CharField(max_length=255)
    secret = models.BinaryField(editable=False)  # the token, encrypted
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "host"], name="git_credential_user_host")
        ]

    def __str__(self) -> str:
        return f"{self.username}@{self.host}"


class EgressRule(models.Model):
    """A host sandboxed traffic may reach through the egress proxy (``HARNESS_EGRESS=proxy``),
    for everyone or for one user; added to ``HARNESS_EGRESS_ALLOW``. Staff edit these."""

    host = models.CharField(max_length=255, help_text="host, an IP address or *.domain")
    ports = models.CharField(max_length=100, default="443,80", help_text="comma list of ports")
    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="egress_rules", help_text="empty: everyone")  # fmt: skip
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["host"]

    def __str__(self) -> str:
        return f"{self.host}:{self.ports} ({self.user or 'everyone'})"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from agent.egress.rules import rules_of

        try:
            rules_of(self.host, self.ports)
        except ValueError as exc:
            raise ValidationError(str(exc)) from None


class EgressLog(models.Model):
    """One connection a sandbox asked the egress proxy for, admitted or refused. Written by
    the proxy, read-only in the admin; the oldest rows go past ``HARNESS_EGRESS_LOG_ROWS``."""

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    conversation = models.ForeignKey(Conversation, null=True, on_delete=models.SET_NULL,
                                     related_name="+")  # fmt: skip
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    bytes_up = models.PositiveBigIntegerField(default=0)
    bytes_down = models.PositiveBigIntegerField(default=0)
    allowed = models.BooleanField()
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-time"]
        verbose_name_plural = "egress log"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.host}:{self.port}"


class EgressDay(models.Model):
    """The bytes one user's sandboxes moved through the egress proxy on one day (UTC): the
    ledger ``HARNESS_EGRESS_MB_PER_DAY`` is checked against."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    date = models.DateField()
    bytes = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "date"], name="egress_user_date")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.date}: {self.bytes} bytes"
