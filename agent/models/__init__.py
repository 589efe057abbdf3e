"""Database models. The custom user model is here from the first migration on."""

from agent.models.accounts import (
    ApiToken,
    AuditEntry,
    DeploymentInstructions,
    GitCredential,
    OidcIdentity,
    ProxyIdentity,
    UsageDay,
)
from agent.models.conversations import (
    PROMPT_HISTORY_LIMIT,
    Attachment,
    Branch,
    Conversation,
    Event,
    Membership,
    Project,
    SearchEntry,
    User,
)
from agent.models.egress import EgressDay, EgressLog, EgressRule

__all__ = [
    "ApiToken",
    "Attachment",
    "AuditEntry",
    "Branch",
    "Conversation",
    "DeploymentInstructions",
    "EgressDay",
    "EgressLog",
    "EgressRule",
    "Event",
    "GitCredential",
    "Membership",
    "OidcIdentity",
    "PROMPT_HISTORY_LIMIT",
    "Project",
    "ProxyIdentity",
    "SearchEntry",
    "UsageDay",
    "User",
]
