"""Database fixtures for the benchmark and the chaos script, run inside the server's
environment (``manage.py shell -c``), so they land in the database the server uses."""

from __future__ import annotations

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore

from agent.core import events as events_
from agent.models import Conversation, Event, User

MODEL = "claude-haiku-4-5"


def signed_in_session(user: User) -> str:
    """A session key as the login view would create it (the cookie the page sends)."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def sessions(count: int, prefix: str) -> list[dict]:
    """``count`` users (created once, reused by later calls), each with a new conversation
    and a new signed-in session."""
    out = []
    for i in range(count):
        user, _ = User.objects.get_or_create(username=f"{prefix}{i}")
        conversation = Conversation.objects.create(owner=user, model=MODEL)
        out.append({
            "user": user.username,
            "conversation": str(conversation.id),
            "session": signed_in_session(user),
        })  # fmt: skip
    return out


ANSWER = """Here is what `{name}` does, step by step:

1. It reads the **configuration** and checks each value.
2. It opens the workspace and lists the files.

```python
def handler(event):
    return {{"ok": True, "seq": {seq}}}
```

See the [docs](https://example.com/docs) for more."""

FILE = "\n".join(f"line {n}: value = compute({n})" for n in range(1, 41))


def long_conversation(events: int, username: str = "bench-long") -> dict:
    """A conversation of ``events`` stored events in the shape real runs leave: prompts,
    statuses, markdown answers with code, tool calls with 40-line results, usage."""
    user, _ = User.objects.get_or_create(username=username)
    conversation = Conversation.objects.create(owner=user, model=MODEL, title="Long session")
    rows: list[Event] = []

    def add(event: events_.Event) -> None:
        seq = len(rows) + 1
        payload = {**event.to_dict(), "seq": seq}
        rows.append(Event(conversation=conversation, seq=seq, type=event.type, payload=payload))

    exchange = 0
    while len(rows) < events:
        exchange += 1
        tool_id = f"toolu_bench_{exchange}"
        for event in (
            events_.UserEvent(content=f"Explain module {exchange} and read its source."),
            events_.StatusEvent(state="thinking"),
            events_.ToolCallEvent(id=tool_id, name="read", input={"path": f"m{exchange}.py"}),
            events_.StatusEvent(state="running_tool", message="read"),
            events_.ToolResultEvent(id=tool_id, result=FILE, isError=False),
            events_.StatusEvent(state="thinking"),
            events_.TextEvent(content=ANSWER.format(name=f"m{exchange}.py", seq=len(rows))),
            events_.UsageEvent(input_tokens=1200, output_tokens=300, cost_usd=0.0027),
            events_.StatusEvent(state="idle"),
        ):
            if len(rows) < events:
                add(event)
    seq = len(rows)
    Event.objects.bulk_create(rows, batch_size=500)
    Conversation.objects.filter(id=conversation.id).update(last_seq=seq, state="idle")
    return {"conversation": str(conversation.id), "session": signed_in_session(user),
            "events": seq}  # fmt: skip
