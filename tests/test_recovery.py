"""Conversations left running by a stopped server are marked interrupted and stay usable."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from agent.models import Conversation, Event, User
from tests.history_check import assert_valid_history

pytestmark = pytest.mark.django_db


def test_recover_runs_marks_interrupted_and_repairs_history():
    owner = User.objects.create_user("frank", password="pw-frank-123")
    conversation = Conversation.objects.create(
        owner=owner, model="m", state="running", last_seq=5,
        history=[
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "x"}}]},
        ],
    )  # fmt: skip
    idle = Conversation.objects.create(owner=owner, model="m", state="idle")
    call_command("recover_runs")
    conversation.refresh_from_db()
    assert conversation.state == "interrupted" and conversation.last_seq == 7
    assert_valid_history(conversation.history + [{"role": "assistant", "content": "x"}])
    closing = list(
        Event.objects.filter(conversation=conversation).values_list("payload", flat=True)
    )
    assert [e["type"] for e in closing] == ["error", "status"]
    assert closing[0]["code"] == "interrupted" and closing[1]["state"] == "error"
    assert [e["seq"] for e in closing] == [6, 7]
    idle.refresh_from_db()
    assert idle.state == "idle"
