"""The egress rules, log and per-user daily bytes (the egress proxy's and the git relay's)."""

from __future__ import annotations

from django.db import models

from agent.models.conversations import Conversation, User


class EgressRule(models.Model):
    """A host sandboxed traffic may reach through the egress proxy (``HARNESS_EGRESS=proxy``)
    and a project's clone or push through the git relay, for everyone or for one user;
    added to ``HARNESS_EGRESS_ALLOW``. Staff edit these."""

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
    """One connection a sandbox asked the egress proxy for, or one git operation through the
    git relay, admitted or refused. Written by them, read-only in the admin; the oldest rows
    go past ``HARNESS_EGRESS_LOG_ROWS``."""

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
    """The bytes one user's sandboxes moved through the egress proxy and the git relay on one
    day (UTC): the ledger ``HARNESS_EGRESS_MB_PER_DAY`` is checked against."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="+")
    date = models.DateField()
    bytes = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "date"], name="egress_user_date")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.date}: {self.bytes} bytes"
