"""File names with bidirectional controls are shown as they are, not reordered: the attack
is a workspace file ``invoice`` + U+202E + ``fdp.exe``, which a browser draws as
"invoiceexe.pdf". Every place a person sees a workspace name or path (the Files panel's
listing, breadcrumbs and file view, a tool card, an approval card, an attached image's
name, the download's file name, the admin) shows each control as ``⟨U+202E⟩`` and holds
none of them raw; links still reach the file."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest
from django.template.loader import render_to_string

from agent.access import new_conversation
from agent.core.events import ApprovalEvent, ToolCallEvent, ToolResultEvent, UserEvent
from agent.models import Conversation, Event, User
from agent.ui.bidi import BIDI_CONTROLS, bidi_visible
from agent.ui.transcript import Transcript

pytestmark = pytest.mark.django_db

RLO = "\u202e"
NAME = f"invoice{RLO}fdp.exe"  # reads "invoiceexe.pdf"
SHOWN = "invoice⟨U+202E⟩fdp.exe"
FOLDER = "a\u2067b\u200fc"  # an isolate and a mark in a directory's name


def raw_controls(text: str) -> set[str]:
    # (``#files-body``'s ``data-path`` keeps the exact path: a hook for programs, never drawn)
    drawn = re.sub(r'data-path="[^"]*"', "", text)
    return BIDI_CONTROLS & set(drawn)


def test_every_bidi_control_is_written_as_its_code():
    controls = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
    assert {ord(c) for c in BIDI_CONTROLS} == set(controls)
    for code in controls:
        assert bidi_visible(f"a{chr(code)}b") == f"a⟨U+{code:04X}⟩b"
    plain = "naïve/שלום/مرحبا/日本.txt <&>"  # right-to-left letters themselves are kept
    assert bidi_visible(plain) == plain


@pytest.fixture
def panel(client, two_workspaces):
    grace, mine, _ = two_workspaces
    (mine / FOLDER).mkdir()
    (mine / FOLDER / NAME).write_bytes(b"MZ not a pdf")
    client.force_login(grace)
    return new_conversation(grace, "claude-haiku-4-5")


def test_the_files_panel_shows_the_controls_in_listings_and_breadcrumbs(client, panel):
    base = f"/c/{panel.id}/files/"
    root = client.get(base).content.decode()
    assert "a⟨U+2067⟩b⟨U+200F⟩c/" in root and not raw_controls(root)
    inside = client.get(base, {"path": FOLDER}).content.decode()
    assert SHOWN in inside and "a⟨U+2067⟩b⟨U+200F⟩c" in inside  # the entry, the crumb
    assert not raw_controls(inside)
    assert quote(f"{FOLDER}/{NAME}") in inside  # the link reaches the real name
    assert f'title="Download {SHOWN}"' in inside
    shown = client.get(base, {"path": f"{FOLDER}/{NAME}"}).content.decode()
    assert (
        f"{FOLDER.replace(chr(0x2067), '⟨U+2067⟩').replace(chr(0x200F), '⟨U+200F⟩')}/{SHOWN}"
        in shown
    )
    assert not raw_controls(shown)


def test_the_download_is_named_with_the_controls_shown(client, panel):
    response = client.get(f"/c/{panel.id}/files/download", {"path": f"{FOLDER}/{NAME}"})
    assert response.status_code == 200 and response.content == b"MZ not a pdf"
    disposition = response["Content-Disposition"]
    assert disposition.startswith("attachment;") and quote(SHOWN) in disposition
    assert quote(RLO) not in disposition and not raw_controls(disposition)


def cards(events) -> str:
    parts = Transcript.of(events).parts
    return "".join(render_to_string("agent/_part.html", {"part": part}) for part in parts)


def test_tool_and_approval_cards_show_the_controls():
    listing = json.dumps({"entries": f"{NAME}\n{FOLDER}/"})
    html = cards([
        ToolCallEvent(seq=1, id="t1", name="list_dir", input={"path": FOLDER}),
        ToolResultEvent(seq=2, id="t1", result=listing, isError=False),
        ToolCallEvent(seq=3, id="t2", name="read", input={"path": f"{FOLDER}/{NAME}.py"}),
        ToolResultEvent(seq=4, id="t2", result=json.dumps({"content": f"x = '{RLO}'\n"}),
                        isError=False),
        ToolCallEvent(seq=5, id="t3", name="edit", input={"path": NAME, "old_str": "a",
                                                          "new_str": "b"}),
        ToolResultEvent(seq=6, id="t3", result=json.dumps({"ok": True}), isError=False,
                        display={"kind": "diff", "diff": f"--- {NAME}\n+++ {NAME}\n-a\n+b"}),
        ToolCallEvent(seq=7, id="t4", name="bash", input={"command": f"rm {NAME}"}),
        ToolResultEvent(seq=8, id="t4", result=json.dumps({"error": f"no {NAME}"}),
                        isError=True),
        ApprovalEvent(seq=9, id="t5", name="write", input={"path": NAME, "content": RLO}),
        ApprovalEvent(seq=10, id="t6", name="edit", input={"path": NAME, "old_str": "a",
                                                           "new_str": "b"}),
    ])  # fmt: skip
    assert not raw_controls(html)
    assert html.count(SHOWN) >= 8  # headers, inputs, the listing, the diff, the error
    assert 'class="tool-target" title="invoice⟨U+202E⟩fdp.exe"' in html


def test_an_attached_images_name_shows_the_controls():
    image = {"sha256": "ab" * 32, "media_type": "image/png", "name": f"shots/{NAME}.png"}
    html = cards([UserEvent(seq=1, content="look", images=[image])])
    assert f"{SHOWN}.png" in html and not raw_controls(html)


def test_the_admin_shows_the_controls(client):
    root = User.objects.create_superuser("root", password="pw-root-123")
    client.force_login(root)
    tools = Conversation.objects.create(owner=root, model="claude-haiku-4-5")
    call = {"type": "tool_call", "id": "t1", "name": "read", "input": {"path": NAME}}
    result = {"type": "tool_result", "id": "t1", "result": json.dumps({"content": NAME}),
              "isError": False}  # fmt: skip
    for seq, payload in enumerate([call, result], 1):
        Event.objects.create(conversation=tools, seq=seq, type=payload["type"],
                             payload={**payload, "seq": seq, "timestamp": 1})  # fmt: skip
    # The event list's summary of an event that names the file.
    other = Conversation.objects.create(owner=root, model="claude-haiku-4-5")
    Event.objects.create(conversation=other, seq=1, type="user",
                         payload={"type": "user", "content": f"open {NAME}", "seq": 1})  # fmt: skip
    pages = [
        f"/admin/agent/conversation/{tools.id}/change/",  # the transcript
        "/admin/agent/event/",
        f"/admin/agent/event/{Event.objects.get(conversation=tools, seq=1).pk}/change/",
    ]
    for url in pages:
        page = client.get(url).content.decode()
        assert SHOWN in page and not raw_controls(page), url
