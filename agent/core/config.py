"""Agent configuration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DEFAULT_MODEL = "claude-haiku-4-5"
DEMO_MODEL = "offline-demo"

# Selectable models: current Claude models first, then the earlier Claude 3 models,
# which stay selectable (the labels are what the model menu shows).
MODELS: tuple[tuple[str, str], ...] = (
    ("claude-haiku-4-5", "Claude Haiku 4.5"),
    ("claude-sonnet-4-5", "Claude Sonnet 4.5"),
    ("claude-opus-4-5", "Claude Opus 4.5"),
    ("claude-opus-4-1", "Claude Opus 4.1"),
    ("claude-3-haiku-20240307", "Claude 3 Haiku"),
    ("claude-3-5-sonnet-20241022", "Claude 3.5 Sonnet"),
    ("claude-3-opus-20240229", "Claude 3 Opus"),
)

# Tokens of context every listed model takes (the API's limit for the request's input).
CONTEXT_WINDOW = 200_000

# The smallest budget the API accepts for extended thinking.
MIN_THINKING_BUDGET = 1024
# A conversation's thinking level (the page's select, the API's PATCH) → budget in tokens.
THINKING_LEVELS = {"off": 0, "low": 2048, "medium": 8192, "high": 24576}
# The models that think (extended thinking); the Claude 3 models do not.
THINKING_MODELS = frozenset({"claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-5",
                             "claude-opus-4-1"})  # fmt: skip


# A conversation's tool approval: ``auto`` runs every tool at once, ``ask``
# waits for a decision before the tools that change things, ``read_only`` does not offer them.
APPROVAL_MODES = ("auto", "ask", "read_only")
GATED_TOOLS = frozenset({"write", "edit", "bash"})
# Not offered in ``read_only`` either: ``background`` stops what bash started.
CHANGING_TOOLS = GATED_TOOLS | {"background"}


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


@dataclass(frozen=True, slots=True)
class Config:
    api_key: str | None = None  # None: the offline demo model serves
    model: str = DEFAULT_MODEL
    max_tokens: int = 4096
    system_prompt: str | None = None  # None: the built-in identity text
    max_turns: int = 10
    base_url: str | None = None
    thinking_budget: int = 0  # 0 is off
    # The model's context window in tokens, and the share of it at which the history is
    # compacted (HARNESS_COMPACT_AT; the model summarises the older exchanges).
    context_window: int = CONTEXT_WINDOW
    compact_at: float = 0.8
    approval: str = "auto"  # APPROVAL_MODES

    def __post_init__(self) -> None:
        if not self.model or not self.model.strip():
            raise ConfigError("model must not be empty")
        if self.max_tokens < 1:
            raise ConfigError("max_tokens must be at least 1")
        if self.max_turns < 1:
            raise ConfigError("max_turns must be at least 1")
        if self.thinking_budget < 0:
            raise ConfigError("thinking_budget must not be negative")
        if self.thinking_budget:
            if self.thinking_budget < MIN_THINKING_BUDGET:
                raise ConfigError(f"thinking_budget must be 0 or at least {MIN_THINKING_BUDGET}")
            if self.thinking_budget >= self.max_tokens:
                raise ConfigError("thinking_budget must be smaller than max_tokens")
        if self.context_window < 2 * self.max_tokens:
            raise ConfigError("context_window must be at least twice max_tokens")
        if not 0.1 <= self.compact_at <= 1:
            raise ConfigError("compact_at must be between 0.1 and 1")
        if self.approval not in APPROVAL_MODES:
            raise ConfigError(f"approval must be one of {', '.join(APPROVAL_MODES)}")

    @property
    def offline(self) -> bool:
        return not self.api_key

    def replace(self, **changes) -> Config:
        return dataclasses.replace(self, **changes)

    def with_thinking(self, level: str) -> Config:
        """This config at a thinking level ("" keeps the configured budget). The answer's
        own budget (``max_tokens``) is kept on top of the thinking budget; a model that
        does not think gets none."""
        if not level:
            return self
        budget = THINKING_LEVELS[level] if self.model in THINKING_MODELS else 0
        base = self.max_tokens - self.thinking_budget
        return self.replace(thinking_budget=budget, max_tokens=base + budget)
