"""Keeping attached images (docs/API.md) in the database: within the owner's room (the
workspace quota, counted apart from the files), copied for a fork inside the database and
refused past the forker's room with nothing copied, and read back by the loop's loader."""

from __future__ import annotations

import base64

import pytest
from asgiref.sync import async_to_sync

from agent.core.images import ImageRef
from agent.models import Attachment, Conversation, Event, User
from agent.runs import attachments
from agent.runs.attachments import ImageRefused, Snapshot
from agent.runs.branches import fork_copy
from agent.runs.claim import RunRefused

pytestmark = pytest.mark.django_db(transaction=True)
MB = 1024 * 1024


def snapshot(n: int, size: int) -> Snapshot:
    return Snapshot(ImageRef(f"{n:02x}" * 32, "image/png", f"uploads/{n}.png"), b"\x89" * size)


@pytest.fixture
def owner(settings):
    settings.HARNESS_WORKSPACE_QUOTA_MB = 1
    return User.objects.create_user("ada", password="pw-ada-12345")


def conversation_of(user) -> Conversation:
    return Conversation.objects.create(owner=user, model="claude-haiku-4-5")


def test_images_are_kept_within_the_owners_room_and_past_it_refused(owner):
    first, second = conversation_of(owner), conversation_of(owner)
    attachments.store(first.id, owner.pk, [snapshot(1, MB // 2)])
    assert Attachment.objects.filter(conversation=first).count() == 1
    with pytest.raises(ImageRefused, match="limit is 1 MB"):
        attachments.store(second.id, owner.pk, [snapshot(2, MB // 2 + 1)])
    assert not Attachment.objects.filter(conversation=second).exists()
    # Kept already (an edited prompt's images): not counted again.
    attachments.store(first.id, owner.pk, [snapshot(1, MB // 2), snapshot(1, MB // 2)])
    assert Attachment.objects.filter(conversation=first).count() == 1  # the same image: once


def test_a_fork_copies_its_images_inside_the_database_and_the_loader_reads_them(owner):
    original = conversation_of(owner)
    kept = snapshot(3, 1000)
    attachments.store(original.id, owner.pk, [kept])
    Event.objects.create(conversation=original, seq=1, type="user",
                         payload={"type": "user", "seq": 1, "content": "see",
                                  "images": [kept.ref.to_dict()]})  # fmt: skip
    original.last_seq = 1
    original.history = [{"role": "user", "content": [kept.ref.block()], "_seq": 1}]
    original.save()
    reader = User.objects.create_user("bob", password="pw-bob-12345")
    fork = fork_copy(original, reader, None)
    row = Attachment.objects.get(conversation=fork)
    assert (row.sha256, row.media_type, row.size, bytes(row.data)) == (
        kept.ref.sha256, "image/png", 1000, kept.data)  # fmt: skip
    loaded = async_to_sync(attachments.loader(fork.id))([kept.ref.sha256, "ff" * 32])
    assert loaded == {kept.ref.sha256: base64.b64encode(kept.data).decode()}


def test_a_fork_past_the_forkers_room_is_refused_and_nothing_is_made(owner):
    original = conversation_of(owner)
    kept = snapshot(4, MB // 2)
    attachments.store(original.id, owner.pk, [kept])
    Event.objects.create(conversation=original, seq=1, type="user",
                         payload={"type": "user", "seq": 1, "content": "see",
                                  "images": [kept.ref.to_dict()]})  # fmt: skip
    original.last_seq = 1
    original.save()
    full = User.objects.create_user("cy", password="pw-cy-123456")
    attachments.store(conversation_of(full).id, full.pk, [snapshot(5, MB // 2 + 1)])
    before = Conversation.objects.filter(owner=full).count()
    with pytest.raises(RunRefused) as refused:
        fork_copy(original, full, None)
    assert refused.value.code == "quota_exceeded"
    assert Conversation.objects.filter(owner=full).count() == before  # whole or not at all
