"""Fixtures the page tests share: ada signed in on the test client, bob another user."""

from __future__ import annotations

import pytest

from agent.models import User


@pytest.fixture
def ada(client):
    user = User.objects.create_user(username="ada", password="pw-ada-123")
    client.force_login(user)
    return user


@pytest.fixture
def bob():
    return User.objects.create_user(username="bob", password="pw-bob-123")
