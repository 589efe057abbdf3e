"""What a user signs in and pays with, and what staff set and audit."""

from __future__ import annotations

from django.db import models

from agent.models.conversations import User


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
