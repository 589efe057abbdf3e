"""Images attached to a prompt (interfaces §13): read from the owner's workspace when the
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

from agent.core import images
from agent.core.images import BadImage, ImageRef
from agent.core.tools.workspace import PathError
from agent.models import Attachment, Event
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
    work: run it in a thread); ``ImageRefused`` naming the first that cannot be sent."""
    workspace = workspace_for(owner_id)
    taken = []
    for path in paths:
        try:
            rel, data = browse.download(workspace, path)
            media_type, _, _ = images.sniff(data)
        except (PathError, BadImage) as exc:
            raise ImageRefused(f"The image {path[:200]!r} cannot be sent: {exc}.") from exc
        except browse.TooLarge as exc:
            message = f"The image {path[:200]!r} cannot be sent: the model takes up to 5 MB."
            raise ImageRefused(message) from exc
        ref = ImageRef(hashlib.sha256(data).hexdigest(), media_type, rel)
        taken.append(Snapshot(ref, data))
    return taken


def store(conversation_id, snapshots: list[Snapshot]) -> None:
    """Keep the snapshots with the conversation (the same image twice: once). In the
    caller's transaction."""
    Attachment.objects.bulk_create(
        [
            Attachment(
                conversation_id=conversation_id,
                sha256=s.ref.sha256,
                media_type=s.ref.media_type,
                size=len(s.data),
                data=s.data,
            )  # fmt: skip
            for s in snapshots
        ],
        ignore_conflicts=True,
    )


def of_prompt(conversation_id, seq: int) -> list[Snapshot]:
    """The images a stored prompt carried (an edit of it keeps them: interfaces §11)."""
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


def copy(from_id, to_id, shas: list[str]) -> None:
    """A fork's own copies of the images its copied history names."""
    rows = Attachment.objects.filter(conversation_id=from_id, sha256__in=shas)
    Attachment.objects.bulk_create(
        [
            Attachment(
                conversation_id=to_id,
                sha256=row.sha256,
                media_type=row.media_type,
                size=row.size,
                data=row.data,
            )  # fmt: skip
            for row in rows
        ],
        ignore_conflicts=True,
    )


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
