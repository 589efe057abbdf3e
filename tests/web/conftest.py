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


@pytest.fixture
def two_workspaces(settings, tmp_path):
    """grace's and heidi's workspaces (empty), under this test's own directory."""
    from agent.models import User
    from agent.runs.workspaces import workspace_path

    settings.HARNESS_WORKSPACES = tmp_path / "workspaces"
    grace = User.objects.create_user("grace", password="pw-grace-123")
    heidi = User.objects.create_user("heidi", password="pw-heidi-123")
    mine, theirs = workspace_path(grace.pk), workspace_path(heidi.pk)
    for root in (mine, theirs):
        root.mkdir(parents=True)
    (mine / "src").mkdir()
    return grace, mine, theirs
