"""Images attached to a prompt: read from the owner's workspace when the
prompt is sent, checked, kept with the conversation, and given to the loop when it builds
a request.

A prompt names its images by workspace path (the page uploads them first, to
``uploads/``). Each is read through the tools' confinement (walked from the workspace's
descriptor in a file worker: no symlink out, no FIFO), recognised by its bytes, and
snapshotted: the ``Attachment`` rows are written in the claim's transaction, so a refused
prompt leaves none behind and a later change to the file changes nothing already sent.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import partial

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from agent.core import images
from agent.core.images import BadImage, ImageRef
from agent.core.tools.workspace import PathError
from agent.models import Attachment, Event, User
from agent.runs.workspaces import workspace_for
from agent.ui import browse

PATH_MAX = 1000


class ImageRefused(Exception):
    """An attached image that cannot be sent; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    ref: ImageRef
    data: bytes


def checked_paths(value) -> list[str]:
    """The prompt's ``images``: a list of workspace paths (none: an empty list)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(path, str) and 0 < len(path) <= PATH_MAX for path in value
    ):
        raise ImageRefused("'images' must be a list of workspace paths.")
    if len(value) > images.MAX_PER_PROMPT:
        raise ImageRefused(f"A prompt takes up to {images.MAX_PER_PROMPT} images.")
    return list(dict.fromkeys(value))


def snapshot(owner_id: int, paths: list[str]) -> list[Snapshot]:
    """The images at ``paths`` in the owner's workspace, read and checked (blocking file
    work: run it in a thread); ``ImageRefused`` naming the first that cannot be sent. No
    more is read than an image may hold (``images.MAX_BYTES``), nor than a prompt's
    images together (``images.PROMPT_BYTES``)."""
    workspace = workspace_for(owner_id)
    taken, total = [], 0
    for path in paths:
        shown = images.shown_name(path)
        try:
            rel, data = browse.download(workspace, path, cap=images.MAX_BYTES)
            media_type, _, _ = images.sniff(data)
        except (PathError, BadImage) as exc:
            raise ImageRefused(f"The image {shown!r} cannot be sent: {exc}.") from exc
        except browse.TooLarge as exc:
            message = (f"The image {shown!r} cannot be sent: the model takes images up to "
                       "3.75 MB (5 MB once encoded).")  # fmt: skip
            raise ImageRefused(message) from exc
        total += len(data)
        if total > images.PROMPT_BYTES:
            raise ImageRefused(f"The images of one prompt may hold up to "
                               f"{images.PROMPT_BYTES // 1048576} MB together.")  # fmt: skip
        ref = ImageRef(hashlib.sha256(data).hexdigest(), media_type, images.shown_name(rel))
        taken.append(Snapshot(ref, data))
    return taken


def _hold_room(owner_id: int) -> None:
    """Lock the owner's row until the transaction ends, so that the prompts and forks of
    one owner check and fill the room one after another: PostgreSQL runs them at once, and
    each saw the room as it was before any of them (SQLite serialises writers anyway).
    ``no_key``: rows that only point at the owner (a fork's new conversation) neither wait
    for this lock nor hold it up."""
    list(User.objects.select_for_update(no_key=True).filter(pk=owner_id).values_list("pk"))


def check_room(owner_id: int, adding: int) -> None:
    """The images kept with the owner's conversations (in the database, apart from the
    workspace's files) stay within their workspace quota (``HARNESS_WORKSPACE_QUOTA_MB``)
    once ``adding`` more bytes are kept: ``ImageRefused`` past it. Inside the transaction
    that keeps them, which holds the owner's row until it ends."""
    if not adding:
        return
    _hold_room(owner_id)
    limit = settings.HARNESS_WORKSPACE_QUOTA_MB * 1024 * 1024
    used = (
        Attachment.objects.filter(conversation__owner_id=owner_id)
        .aggregate(total=Sum("size"))["total"] or 0
    )  # fmt: skip
    if used + adding > limit:
        raise ImageRefused(
            f"The images kept with your conversations take {used / 1048576:.0f} MB; the "
            f"limit is {settings.HARNESS_WORKSPACE_QUOTA_MB} MB. Delete conversations with "
            "images to make room."
        )


@transaction.atomic  # (the room checked and filled under one lock)
def store(conversation_id, owner_id: int, snapshots: list[Snapshot]) -> None:
    """Keep the snapshots with the conversation (the same image twice: once), within the
    owner's room (``ImageRefused``; only what is new counts: an edited prompt's images are
    kept already). In the caller's transaction, if any."""
    kept = set(
        Attachment.objects.filter(conversation_id=conversation_id,
                                  sha256__in=[s.ref.sha256 for s in snapshots])
        .values_list("sha256", flat=True)
    )  # fmt: skip
    new = {s.ref.sha256: s for s in snapshots if s.ref.sha256 not in kept}.values()
    check_room(owner_id, sum(len(snapshot.data) for snapshot in new))
    Attachment.objects.bulk_create(
        [
            Attachment(
                conversation_id=conversation_id,
                sha256=s.ref.sha256,
                media_type=s.ref.media_type,
                size=len(s.data),
                data=s.data,
            )
            for s in new
        ],  # fmt: skip
        ignore_conflicts=True,
    )


def of_prompt(conversation_id, seq: int) -> list[Snapshot]:
    """The images a stored prompt carried (an edit of it keeps them)."""
    payload = (
        Event.objects.filter(conversation_id=conversation_id, seq=seq, type="user")
        .values_list("payload", flat=True).first()
    )  # fmt: skip
    listed = (payload or {}).get("images") or ()
    refs = [ImageRef.from_dict(image) for image in listed if isinstance(image, dict)]
    rows = Attachment.objects.filter(conversation_id=conversation_id,
                                     sha256__in=[ref.sha256 for ref in refs])  # fmt: skip
    data = dict(rows.values_list("sha256", "data"))
    return [Snapshot(ref, bytes(data[ref.sha256])) for ref in refs if ref.sha256 in data]


@transaction.atomic  # (the room checked and filled under one lock)
def copy(from_id, to_id, owner_id: int, shas: list[str]) -> None:
    """A fork's own copies of the images its copied history names, within its owner's
    room (``ImageRefused`` past it), copied inside the database (one ``INSERT … SELECT``:
    the bytes never pass through this process)."""
    rows = Attachment.objects.filter(conversation_id=from_id, sha256__in=shas)
    check_room(owner_id, rows.aggregate(total=Sum("size"))["total"] or 0)
    # Raw SQL: the ORM has no INSERT … SELECT, and copying through model instances would
    # read every image's bytes into this process.
    table = connection.ops.quote_name(Attachment._meta.db_table)
    key = Attachment._meta.get_field("conversation").target_field
    marks = ", ".join(["%s"] * len(shas))
    created = Attachment._meta.get_field("created").get_db_prep_value(timezone.now(), connection)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (conversation_id, sha256, media_type, size, data, created) "
            f"SELECT %s, sha256, media_type, size, data, %s FROM {table} "
            f"WHERE conversation_id = %s AND sha256 IN ({marks}) ON CONFLICT DO NOTHING",
            [key.get_db_prep_value(to_id, connection), created,
             key.get_db_prep_value(from_id, connection), *shas],
        )  # fmt: skip


def loader(conversation_id) -> images.Loader:
    """The loop's image loader for one conversation: base64 data by sha256."""

    @partial(database_sync_to_async, thread_sensitive=False)
    def load(shas: list[str]) -> dict[str, str]:
        rows = Attachment.objects.filter(conversation_id=conversation_id, sha256__in=shas)
        return {sha: base64.b64encode(bytes(data)).decode("ascii")
                for sha, data in rows.values_list("sha256", "data")}  # fmt: skip

    return load


def image(conversation_id, sha256: str) -> Attachment | None:
    """One attached image of the conversation (the caller has checked access to it)."""
    if not isinstance(sha256, str) or len(sha256) != 64:
        return None
    return Attachment.objects.filter(conversation_id=conversation_id, sha256=sha256).first()
