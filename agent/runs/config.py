"""Builds the agent core's objects from Django settings (the only bridge between the two)."""

from __future__ import annotations

from django.conf import settings

from agent.core.config import Config


def agent_config(**overrides) -> Config:
    config = Config(
        api_key=settings.ANTHROPIC_API_KEY,
        base_url=settings.ANTHROPIC_BASE_URL,
        model=settings.HARNESS_MODEL,
        max_tokens=settings.HARNESS_MAX_TOKENS,
        max_turns=settings.HARNESS_MAX_TURNS,
        system_prompt=settings.HARNESS_SYSTEM_PROMPT,
        thinking_budget=settings.HARNESS_THINKING,
        compact_at=settings.HARNESS_COMPACT_AT,
        approval=settings.HARNESS_APPROVAL,
    )
    return config.replace(**overrides) if overrides else config
