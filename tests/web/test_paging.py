"""A long conversation's page shows its latest parts; earlier ones come a page at a time from
``/c/<id>/earlier`` (to whoever may open the page, and to nobody else)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agent.models import Conversation
from agent.ui import paging
from agent.web.sharing import set_member
from tests.web.test_views import add_events

pytestmark = pytest.mark.django_db


@pytest.fixture
def long(ada):
    """PAGE * 2 + 10 exchanges (a prompt and its answer each): five pages of parts."""
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5", title="t")
    exchanges = paging.PAGE * 2 + 10
    add_events(conversation, *(
        event for n in range(exchanges)
        for event in ({"type": "user", "content": f"prompt {n}"},
                      {"type": "text", "content": f"answer {n}"})
    ))  # fmt: skip
    return conversation


def seqs(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-part="(?:user|text)"[^>]*data-seq="(\d+)"', html)]


def earlier_button(html: str) -> tuple[int, str] | None:
    found = re.search(r'id="earlier"[^>]*data-before="(\d+)"\s+data-url="([^"]+)"', html)
    return (int(found[1]), found[2].replace("&amp;", "&")) if found else None


def test_the_page_holds_the_latest_parts_and_the_rest_load_page_by_page(client, long):
    html = client.get(f"/c/{long.id}/").content.decode()
    shown = seqs(html)
    assert len(shown) == paging.PAGE and shown[-1] == long.last_seq
    before, url = earlier_button(html)
    assert before == shown[0]
    everything = shown
    while True:
        response = client.get(url)
        assert response.status_code == 200
        page = response.content.decode()
        assert seqs(page)[-1] < everything[0]
        everything = seqs(page) + everything
        assert 'class="part-times"' in page  # the times of its parts (tool cards have none)
        if earlier_button(page) is None:
            break
        url = earlier_button(page)[1]
    assert everything == list(range(1, long.last_seq + 1))


def test_a_search_link_reaches_back_to_its_part(client, long):
    html = client.get(f"/c/{long.id}/").content.decode()
    url = earlier_button(html)[1]
    page = client.get(url + "&at=3").content.decode()
    assert seqs(page)[0] == 3 and earlier_button(page)[0] == 3


def test_earlier_parts_are_for_those_who_may_open_the_page(long, bob):
    url = f"/c/{long.id}/earlier?before=100"
    other = Client()
    other.force_login(bob)
    assert other.get(url).status_code == 404
    set_member(long, "bob", "viewer")
    assert seqs(other.get(url).content.decode())[-1] == 99
    assert Client().get(url).status_code == 302  # to the sign-in


@pytest.mark.parametrize("query", ["", "?before=x", "?before=5&at=y"])
def test_a_bad_position_is_refused_plainly(client, long, query):
    response = client.get(f"/c/{long.id}/earlier{query}")
    assert response.status_code == 400 and b"event numbers" in response.content


def test_a_short_conversation_has_no_earlier_button(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5", title="t")
    add_events(conversation, {"type": "user", "content": "hi"}, {"type": "text", "content": "yo"})
    html = client.get(f"/c/{conversation.id}/").content.decode()
    assert seqs(html) == [1, 2] and earlier_button(html) is None


def check_tail_reads() -> str:
    """A long conversation's page reads only its latest prompts' events, and shows what a
    read of the whole would: on its first line, on a branch forked from it (with queued
    prompts' deliveries, which are no place to start), and for a conversation too short to
    cut. Run here on SQLite and on PostgreSQL in a live database."""
    from agent.models import Branch, Event, User
    from agent.runs.snapshot import latest, snapshot
    from agent.ui.transcript import Transcript

    owner = User.objects.create_user(f"tail-{Conversation.objects.count()}")

    def exchange(conversation, n: int, branch: int = 0, queued: bool = False):
        rows = [{"type": "user", "content": f"prompt {n}"}, {"type": "text", "content": f"a {n}"}]
        if queued:
            rows[0]["mode"] = "follow_up"
        for payload in rows:
            conversation.last_seq += 1
            seq = conversation.last_seq
            Event.objects.create(conversation=conversation, seq=seq, type=payload["type"],
                                 branch=branch,
                                 payload={**payload, "seq": seq, "timestamp": 1})  # fmt: skip
        conversation.save(update_fields=["last_seq"])

    def page(conversation) -> tuple[list[int], list[int], bool]:
        _, tail, cut = latest(conversation.id, owner, paging.TAIL_EVENTS)
        _, whole = snapshot(conversation.id, owner)
        shown = [p.seq for p in paging.window(Transcript.of(tail).parts)[0]]
        expected = [p.seq for p in paging.window(Transcript.of(whole).parts)[0]]
        assert shown == expected, (shown[:3], expected[:3])
        return [e.seq for e in tail], [e.seq for e in whole], cut

    line = Conversation.objects.create(owner=owner, model="m")
    for n in range(paging.TAIL_EVENTS):
        exchange(line, n)
    tail, whole, cut = page(line)
    assert cut and len(tail) < len(whole) and tail == whole[-len(tail) :]
    assert len(tail) >= paging.TAIL_EVENTS

    forked = Conversation.objects.create(owner=owner, model="m")
    for n in range(50):
        exchange(forked, n)
    Branch.objects.create(conversation=forked, number=0)
    Branch.objects.create(conversation=forked, number=1, parent=0, fork_seq=40)
    Conversation.objects.filter(pk=forked.pk).update(active_branch=1)
    forked.refresh_from_db()
    for n in range(paging.TAIL_EVENTS):
        exchange(forked, 1000 + n, branch=1, queued=n % 2 == 1)
    exchange(forked, 5000, branch=0)  # the first line goes on meanwhile: not on the path
    tail, whole, cut = page(forked)
    assert cut and tail == whole[-len(tail) :]
    first = Event.objects.get(conversation=forked, seq=tail[0])
    assert first.type == "user" and "mode" not in first.payload and first.branch == 1

    short = Conversation.objects.create(owner=owner, model="m")
    for n in range(10):
        exchange(short, n)
    tail, whole, cut = page(short)
    assert not cut and tail == whole
    return "tail reads agree"


def test_a_long_conversations_page_reads_its_latest_prompts_and_shows_the_same():
    assert check_tail_reads() == "tail reads agree"


def test_the_tail_read_behaves_the_same_on_postgresql(tmp_path):
    from testkit.live import LiveServer
    from tests.services import fresh_pg_database

    with fresh_pg_database() as database_url:
        server = LiveServer(tmp_path, DATABASE_URL=database_url)
        server.manage("migrate", "-v", "0")
        code = "from tests.web.test_paging import check_tail_reads\nprint(check_tail_reads())"
        assert server.manage("shell", "-c", code).strip().splitlines()[-1] == "tail reads agree"
