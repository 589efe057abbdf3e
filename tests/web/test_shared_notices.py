"""What "Shared with me" is made of, changed anywhere (the admin's change forms, its delete
pages and bulk delete action, a shell), tells the pages that show it, as the app's own share
actions do: ``shared.changed`` to each reader's group, or to everyone's for a conversation of
the team; an archive also tells the conversation's open pages (``conversation.archived``).

The real admin views on the test client, the in-memory channel layer listened to per group."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agent.models import Conversation, Membership, User
from agent.runs.groups import group_name
from agent.web.revocation import EVERYONE_GROUP, user_group

pytestmark = pytest.mark.django_db(transaction=True)


class Groups:
    """A channel of its own in each group named: what each group was sent, by type."""

    def __init__(self, *groups: str) -> None:
        self.groups, self.layer, self.channels = groups, get_channel_layer(), {}

    async def __aenter__(self) -> Groups:
        for group in self.groups:
            self.channels[group] = await self.layer.new_channel()
            await self.layer.group_add(group, self.channels[group])
        return self

    async def __aexit__(self, *exc) -> None:
        for group, channel in self.channels.items():
            await self.layer.group_discard(group, channel)

    async def sent(self, seconds: float = 0.3) -> dict[str, list[dict]]:
        got: dict[str, list[dict]] = {group: [] for group in self.groups}
        for group, channel in self.channels.items():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    while True:
                        got[group].append(await self.layer.receive(channel))
        return got


def kinds(messages: list[dict]) -> list[str]:
    return [message["type"] for message in messages]


@pytest.fixture
def staff(client):
    client.force_login(User.objects.create_superuser("root", password="pw-root-123"))
    return client


@pytest.fixture
def shared():
    """carol's conversation, shared with dan (viewer); erin reads nothing of hers."""
    carol, dan, erin = (User.objects.create_user(name, password=f"pw-{name}-123")
                        for name in ("carol", "dan", "erin"))  # fmt: skip
    conversation = Conversation.objects.create(owner=carol, model="m", title="Carol's notes")
    Membership.objects.create(conversation=conversation, user=dan, role="viewer")
    return conversation, carol, dan, erin


def change_form(title: str, archived: bool) -> dict:
    form = {"title": title, "instructions": "", "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0", "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000"}  # fmt: skip
    return {**form, "archived": "on"} if archived else form


async def test_archiving_in_the_admin_tells_the_readers_and_the_open_pages(staff, shared):
    conversation, carol, dan, erin = shared
    pages = group_name(conversation.pk)
    watched = (user_group(dan.pk), user_group(erin.pk), EVERYONE_GROUP, pages)
    url = f"/admin/agent/conversation/{conversation.pk}/change/"
    async with Groups(*watched) as groups:
        response = await sync_to_async(staff.post)(url, change_form("Carol's notes", True))
        assert response.status_code == 302
        got = await groups.sent()
        assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
        assert got[pages] == [{"type": "conversation.archived", "archived": True}]
        assert got[user_group(erin.pk)] == got[EVERYONE_GROUP] == []
        response = await sync_to_async(staff.post)(url, change_form("Carol's notes", False))
        got = await groups.sent()
        assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
        assert got[pages] == [{"type": "conversation.archived", "archived": False}]
        # Another field (the instructions, pinned): not in anyone's list, nothing sent.
        form = {**change_form("Carol's notes", False), "instructions": "be brief"}
        await sync_to_async(staff.post)(url, form)
        assert not any((await groups.sent()).values())


async def test_a_rename_in_the_admin_redraws_the_readers_lists(staff, shared):
    conversation, carol, dan, erin = shared
    url = f"/admin/agent/conversation/{conversation.pk}/change/"
    async with Groups(user_group(dan.pk), group_name(conversation.pk)) as groups:
        await sync_to_async(staff.post)(url, change_form("Renamed by staff", False))
        got = await groups.sent()
    assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
    # Its open pages' heading (not archived: the mark stays as it was).
    assert got[group_name(conversation.pk)] == [
        {"type": "conversation.renamed", "title": "Renamed by staff"}]  # fmt: skip


async def test_deleting_in_the_admin_tells_the_members_or_everyone_for_the_team(staff, shared):
    conversation, carol, dan, erin = shared
    team = await Conversation.objects.acreate(owner=carol, model="m", team=True, title="All")
    async with Groups(user_group(dan.pk), user_group(erin.pk), EVERYONE_GROUP) as groups:
        url = f"/admin/agent/conversation/{conversation.pk}/delete/"
        response = await sync_to_async(staff.post)(url, {"post": "yes"})
        assert response.status_code == 302
        got = await groups.sent()
        assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
        assert got[user_group(erin.pk)] == got[EVERYONE_GROUP] == []
        url = f"/admin/agent/conversation/{team.pk}/delete/"
        await sync_to_async(staff.post)(url, {"post": "yes"})
        got = await groups.sent()
        assert kinds(got[EVERYONE_GROUP]) == ["shared.changed"]
    assert not await Conversation.objects.filter(owner=carol).aexists()


async def test_the_admins_bulk_delete_tells_every_member(staff, shared):
    conversation, carol, dan, erin = shared
    other = await Conversation.objects.acreate(owner=carol, model="m", title="More")
    await Membership.objects.acreate(conversation=other, user=erin, role="collaborator")
    form = {"action": "delete_selected", "post": "yes",
            "_selected_action": [str(conversation.pk), str(other.pk)]}  # fmt: skip
    async with Groups(user_group(dan.pk), user_group(erin.pk)) as groups:
        response = await sync_to_async(staff.post)("/admin/agent/conversation/", form)
        assert response.status_code == 302
        got = await groups.sent()
    assert kinds(got[user_group(dan.pk)]) == kinds(got[user_group(erin.pk)]) == ["shared.changed"]
    assert not await Conversation.objects.filter(owner=carol).aexists()


async def test_an_owner_deactivated_or_back_in_the_admin_leaves_and_rejoins_the_lists(
    staff, shared
):
    conversation, carol, dan, erin = shared
    url = f"/admin/agent/user/{carol.pk}/change/"
    page = await sync_to_async(staff.get)(url)
    assert page.status_code == 200
    form = {"username": "carol", "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
            "monthly_budget_usd": "", "bash_enabled": "on"}  # fmt: skip
    async with Groups(user_group(dan.pk), user_group(erin.pk)) as groups:
        response = await sync_to_async(staff.post)(url, form)  # is_active unticked
        assert response.status_code == 302, response.content.decode()[:3000]
        assert not (await User.objects.aget(pk=carol.pk)).is_active
        got = await groups.sent()
        assert "shared.changed" in kinds(got[user_group(dan.pk)])
        assert got[user_group(erin.pk)] == []
        await sync_to_async(staff.post)(url, {**form, "is_active": "on"})
        assert "shared.changed" in kinds((await groups.sent())[user_group(dan.pk)])


async def test_deleting_an_owner_in_the_admin_tells_their_readers(staff, shared):
    conversation, carol, dan, erin = shared
    async with Groups(user_group(dan.pk)) as groups:
        url = f"/admin/agent/user/{carol.pk}/delete/"
        response = await sync_to_async(staff.post)(url, {"post": "yes"})
        assert response.status_code == 302
        assert kinds((await groups.sent())[user_group(dan.pk)]) == ["shared.changed"]


async def test_a_membership_changed_anywhere_tells_its_member(shared):
    """A shell, a data migration, a future admin form: the rows, not the views, hold it."""
    conversation, carol, dan, erin = shared
    async with Groups(user_group(dan.pk), user_group(erin.pk)) as groups:
        added = await Membership.objects.acreate(conversation=conversation, user=erin,
                                                 role="viewer")  # fmt: skip
        assert kinds((await groups.sent())[user_group(erin.pk)]) == ["shared.changed"]
        added.role = "collaborator"
        await added.asave(update_fields=["role"])
        assert kinds((await groups.sent())[user_group(erin.pk)]) == ["shared.changed"]
        await Membership.objects.filter(conversation=conversation).adelete()
        got = await groups.sent()
    assert kinds(got[user_group(dan.pk)]) == kinds(got[user_group(erin.pk)]) == ["shared.changed"]


def test_deleting_a_conversation_deletes_its_events_in_one_query_without_loading_them():
    """The notices' receivers name their models: a receiver of every model's deletes would
    make Django load each of a long conversation's events before deleting it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agent.models import Event

    owner = User.objects.create_user("owner-of-a-long-one")
    conversation = Conversation.objects.create(owner=owner, model="m")
    Event.objects.bulk_create(
        Event(conversation=conversation, seq=n, type="text", payload={"n": n})
        for n in range(1, 301)
    )
    with CaptureQueriesContext(connection) as queries:
        conversation.delete()
    touching = [q["sql"] for q in queries if '"agent_event"' in q["sql"]]
    assert len(touching) == 1 and touching[0].startswith("DELETE"), touching
    assert not Event.objects.filter(conversation_id=conversation.pk).exists()


async def test_a_rename_or_archive_that_changes_nothing_tells_nobody(client, shared):
    """A save of a listed field redraws every reader's list (everyone's, for the team's):
    the page's and the API's forms save only what changes, so a loop of the same rename
    or the same archive flag wakes no other page."""
    conversation, carol, dan, erin = shared
    await sync_to_async(client.force_login)(carol)
    pages = group_name(conversation.pk)
    async with Groups(user_group(dan.pk), pages) as groups:
        for _ in range(3):
            await sync_to_async(client.post)(f"/c/{conversation.pk}/rename",
                                             {"title": "  Carol's   notes "})  # fmt: skip
            await sync_to_async(client.post)(f"/c/{conversation.pk}/archive", {"archived": "0"})
        assert not any((await groups.sent()).values())
        await sync_to_async(client.post)(f"/c/{conversation.pk}/rename", {"title": "New name"})
        got = await groups.sent()
        assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
        assert got[pages] == [{"type": "conversation.renamed", "title": "New name"}]
    await sync_to_async(conversation.refresh_from_db)()
    assert conversation.title == "New name"


async def test_the_owners_own_list_follows_their_conversations_changed_anywhere(client, shared):
    """The tour: archiving in one tab left the conversation in the owner's other tabs'
    lists. Made, renamed, pinned, archived or deleted (the page, the API, a shell): the
    owner's pages are told (``own_list.changed``); a change the list does not show, or one
    that changes nothing, tells nobody; a reader's own list is not the owner's."""
    conversation, carol, dan, erin = shared
    await sync_to_async(client.force_login)(carol)
    base = f"/c/{conversation.pk}"
    own = user_group(carol.pk)
    async with Groups(own, user_group(dan.pk)) as groups:
        for url, form in ((f"{base}/archive", {"archived": "1"}),
                          (f"{base}/pin", {"pinned": "1"}),
                          (f"{base}/rename", {"title": "Renamed in tab A"})):  # fmt: skip
            response = await sync_to_async(client.post)(url, form)
            assert response.status_code == 302, url
            got = await groups.sent()
            assert kinds(got[own]) == ["own_list.changed"], url
            assert "own_list.changed" not in kinds(got[user_group(dan.pk)])
        await sync_to_async(client.post)(f"{base}/pin", {"pinned": "1"})  # already pinned
        await sync_to_async(client.post)(f"{base}/instructions", {"instructions": "be brief"})
        assert (await groups.sent())[own] == []
        made = await Conversation.objects.acreate(owner=carol, model="m")
        assert kinds((await groups.sent())[own]) == ["own_list.changed"]
        await made.adelete()
        assert kinds((await groups.sent())[own]) == ["own_list.changed"]


async def test_a_team_conversation_closed_by_a_save_tells_everyone(shared):
    """The review: closed to the team by a save (a shell's, the admin's), only its members
    were told; every page of the deployment listed it."""
    conversation, carol, dan, erin = shared
    conversation.team = True
    await conversation.asave(update_fields=["team"])
    async with Groups(EVERYONE_GROUP) as groups:
        conversation.team = False
        await conversation.asave()
        assert kinds((await groups.sent())[EVERYONE_GROUP]) == ["shared.changed"]


async def test_the_name_a_first_prompt_gives_reaches_the_lists_that_show_it(shared, settings):
    """The review: the run's claim names a conversation with an ``update()`` (no
    ``post_save``), so its readers' "Shared with me" and the owner's other pages kept "New
    conversation" until a redraw. The claim's signal tells them; a second prompt, nobody."""
    from agent.runs.claim import claim, release

    settings.ANTHROPIC_API_KEY = None  # the offline demo: no quota of spend
    conversation, carol, dan, erin = shared
    await Conversation.objects.filter(pk=conversation.pk).aupdate(title="")
    watched = (user_group(carol.pk), user_group(dan.pk), user_group(erin.pk))
    async with Groups(*watched) as groups:
        await claim(conversation.pk, carol.pk, "plan the okapi census")
        await release(conversation.pk)
        got = await groups.sent()
        assert kinds(got[user_group(carol.pk)]) == ["own_list.changed"]
        assert kinds(got[user_group(dan.pk)]) == ["shared.changed"]
        assert got[user_group(erin.pk)] == []
        await claim(conversation.pk, carol.pk, "and the next")
        await release(conversation.pk)
        assert not any((await groups.sent()).values())
    await conversation.arefresh_from_db()
    assert conversation.title == "plan the okapi census"
