"""Database models. The custom user model is here from the first migration on."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models

PROMPT_HISTORY_LIMIT = 100


class User(AbstractUser):
    # Newest last, at most 100, FIFO, never two equal neighbours (seed 000's prompt history).
    prompt_history = models.JSONField(default=list, blank=True)

    def remember_prompt(self, prompt: str) -> None:
        history = list(self.prompt_history or [])
        if not history or history[-1] != prompt:
            history.append(prompt)
        self.prompt_history = history[-PROMPT_HISTORY_LIMIT:]
