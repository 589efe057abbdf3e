"""Who works, on what: users, projects, conversations and what a conversation holds."""

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
    # Its last activity, which orders the lists: set when a run starts (agent/runs/claim.py).
    # A rename or a setting saves only its own field (update_fields), leaving this one.
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
