"""The page's list controls and instructions: pin (first in the list), archive (only in the
archived view), instructions (owner and collaborators; bounded), each swapping the list or
answering 204 for htmx, and a plain form's redirect without script."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agent.models import Conversation
from agent.web.sharing import set_member

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def listed(html: str) -> list[str]:
    nav = html[html.index('id="conv-list"') :]
    nav = nav[: nav.index("</nav>")]
    return re.findall(r'class="conv-item[^"]*" data-conversation-id="([^"]+)"', nav)


@pytest.fixture
def three(ada):
    return [Conversation.objects.create(owner=ada, model="m", title=f"c{n}") for n in range(3)]


def test_pinning_puts_it_first_and_keeps_its_place_among_the_recent(client, three):
    first, _, newest = three
    before = Conversation.objects.get(pk=first.pk).updated
    response = client.post(f"/c/{first.id}/pin", {"pinned": "1", "current": newest.id}, **HX)
    html = response.content.decode()
    assert listed(html) == [str(first.id), str(three[2].id), str(three[1].id)]
    assert 'aria-label="Pinned"' in html and "Unpin" in html and 'aria-current="page"' in html
    assert Conversation.objects.get(pk=first.pk).updated == before
    page = client.get(f"/c/{newest.id}/").content.decode()
    assert listed(page)[0] == str(first.id)


def test_renaming_or_a_setting_keeps_its_place_among_the_recently_active(client, three):
    """The demanding-user pass: a rename put the conversation first on the next page load."""
    oldest, middle, newest = three
    before = list(Conversation.objects.values_list("id", "updated"))
    client.post(f"/c/{oldest.id}/rename", {"title": "renamed"}, **HX)
    client.post(f"/c/{middle.id}/model", {"model": oldest.model}, **HX)
    client.post(f"/c/{middle.id}/approval", {"approval": "ask"}, **HX)
    client.post(f"/c/{oldest.id}/instructions", {"instructions": "Be brief."}, **HX)
    client.post(f"/c/{middle.id}/pin", {"pinned": "1"}, **HX)
    client.post(f"/c/{middle.id}/pin", {"pinned": "0"}, **HX)
    assert Conversation.objects.get(pk=oldest.pk).title == "renamed"
    assert Conversation.objects.get(pk=middle.pk).approval == "ask"
    assert list(Conversation.objects.values_list("id", "updated")) == before
    page = client.get(f"/c/{newest.id}/").content.decode()
    assert listed(page) == [str(newest.id), str(middle.id), str(oldest.id)]


def test_archiving_hides_it_from_the_list_until_the_archived_view(client, three):
    _, middle, newest = three
    html = client.post(f"/c/{middle.id}/archive", {"archived": "1", "current": newest.id},
                       **HX).content.decode()  # fmt: skip
    assert str(middle.id) not in listed(html)
    assert listed(client.get(f"/c/{newest.id}/").content.decode()) == [str(newest.id),
                                                                     str(three[0].id)]  # fmt: skip
    archived = client.get(f"/c/{newest.id}/list?archived=1").content.decode()
    assert listed(archived) == [str(middle.id)] and "Unarchive" in archived
    assert listed(client.get(f"/c/{newest.id}/?archived=1").content.decode()) == [str(middle.id)]
    # Without script: back to the page; and it is still there to open.
    response = client.post(f"/c/{middle.id}/archive", {"archived": "0", "current": middle.id})
    assert response.status_code == 302 and response["Location"] == f"/c/{middle.id}/"
    assert str(middle.id) in listed(client.get(f"/c/{newest.id}/").content.decode())


def test_only_the_owner_pins_or_archives(three, bob):
    other = Client()
    other.force_login(bob)
    target = three[0]
    assert other.post(f"/c/{target.id}/pin", {"pinned": "1"}).status_code == 404
    set_member(target, "bob", "collaborator")
    assert other.post(f"/c/{target.id}/archive", {"archived": "1"}).status_code == 403
    assert not Conversation.objects.get(pk=target.pk).archived


def test_instructions_are_saved_by_those_who_drive_and_bounded(client, three, bob):
    target = three[0]
    url = f"/c/{target.id}/instructions"
    assert client.post(url, {"instructions": "  Answer in French.  "}, **HX).status_code == 204
    assert Conversation.objects.get(pk=target.pk).instructions == "Answer in French."
    refused = client.post(url, {"instructions": "x" * 4001}, **HX)
    assert refused.status_code == 400 and b"4000 characters" in refused.content
    assert Conversation.objects.get(pk=target.pk).instructions == "Answer in French."
    page = client.get(f"/c/{target.id}/").content.decode()
    assert 'id="instructions-dialog"' in page and ">Answer in French.</textarea>" in page
    assert "Instructions (set)…" in page
    other = Client()
    other.force_login(bob)
    set_member(target, "bob", "viewer")
    assert other.post(url, {"instructions": "mine"}).status_code == 403
    assert 'id="instructions-dialog"' not in other.get(f"/c/{target.id}/").content.decode()
    set_member(target, "bob", "collaborator")
    assert other.post(url, {"instructions": "Be brief."}).status_code == 302
    assert Conversation.objects.get(pk=target.pk).instructions == "Be brief."


def test_instructions_are_text_on_the_page_never_markup(client, three, bob):
    target = three[0]
    set_member(target, "bob", "collaborator")
    other = Client()
    other.force_login(bob)
    hostile = "</textarea><img src=x onerror=alert(1)><textarea>"
    assert other.post(f"/c/{target.id}/instructions", {"instructions": hostile}).status_code == 302
    page = client.get(f"/c/{target.id}/").content.decode()
    assert "<img src=x" not in page and "&lt;/textarea&gt;&lt;img src=x" in page
