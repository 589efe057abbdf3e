"""Images attached to a prompt: what the model takes, and how the history
keeps them.

The history holds a small reference per image (``{"type": "image", "source": {"type":
"harness_image", "sha256", "media_type", "name"}}``), never the bytes: it is stored whole
after every tool result, and a screenshot's base64 is megabytes. Just before a request the
references become the API's base64 image blocks, from a ``Loader`` the run layer gives
(the bytes are snapshots kept by the deployment, not the workspace's file, which may have
changed or gone); an image no longer there becomes a short text saying so.

Only raster formats the API takes are accepted, recognised by their bytes (not a name or
a declared type), within the API's limits, so an attached image never turns a conversation
into one every later request of which fails.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
REF = "harness_image"  # the source type of a reference (never sent to the API)

# The API's limit per image is 5 MB of base64: 3.75 MB of the image's bytes.
MAX_BYTES = 5 * 1024 * 1024 * 3 // 4
MAX_SIDE = 8000  # pixels, the API's limit per side
MAX_PER_PROMPT = 10
PROMPT_BYTES = 15 * 1024 * 1024  # the images of one prompt together (20 MB of base64)
# What one request carries at most (the API takes 32 MB a request, and past 20 images
# wants each under 2000 px): the newest images; older ones are named instead.
REQUEST_IMAGES = 20
REQUEST_BASE64 = 20 * 1024 * 1024
# What the context estimate counts per image: about the tokens of an image at the size
# the API scales to (1.15 megapixels ≈ 1,600 tokens), in the estimate's characters.
ESTIMATE_CHARS = 5600

# sha256 hex digests -> base64 data of those it still has
Loader = Callable[[list[str]], Awaitable[dict[str, str]]]


class BadImage(ValueError):
    """Not an image the model can take; the message says why, for people."""


# Control characters and the bidirectional overrides that would make a name read otherwise.
_UNSHOWN = dict.fromkeys([*range(32), 127, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def shown_name(name: str) -> str:
    """A file name as the model and the page are told it: no control characters, no
    bidirectional overrides, at most 200 characters."""
    return name.translate(_UNSHOWN)[:200]


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An attached image as the history and the ``user`` event name it."""

    sha256: str
    media_type: str
    name: str  # where it came from in the workspace (shown, and told to the model)

    def to_dict(self) -> dict[str, str]:
        return {"sha256": self.sha256, "media_type": self.media_type, "name": self.name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageRef:
        return cls(str(data["sha256"]), str(data["media_type"]), str(data.get("name", "")))

    def block(self) -> dict[str, Any]:
        return {"type": "image", "source": {"type": REF, **self.to_dict()}}


def prompt_blocks(text: str, images: tuple[ImageRef, ...]) -> list[dict[str, Any]]:
    """A prompt's content blocks: its images first (the API's advice), a line naming where
    they are in the workspace (the agent can work on the files too), then the text."""
    if not images:
        return [{"type": "text", "text": text}]
    names = ", ".join(image.name for image in images)
    noun = "image" if len(images) == 1 else "images"
    note = {"type": "text", "text": f"[Attached {noun}, also in the workspace: {names}]"}
    return [*(image.block() for image in images), note, {"type": "text", "text": text}]


def _is_ref(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "image"
        and isinstance(block.get("source"), dict)
        and block["source"].get("type") == REF
    )


def _blocks(message: Message) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def references(messages: list[Message]) -> list[str]:
    """The sha256 of every referenced image, each once, in order."""
    seen: dict[str, None] = {}
    for message in messages:
        for block in _blocks(message):
            if _is_ref(block):
                seen[block["source"]["sha256"]] = None
    return list(seen)


def count(message: Message) -> int:
    return sum(1 for block in _blocks(message) if _is_ref(block))


def _replaced(messages: list[Message], change: Callable[[dict[str, Any]], dict[str, Any]]):
    out = []
    for message in messages:
        blocks = _blocks(message)
        if any(_is_ref(block) for block in blocks):
            message = {**message, "content": [change(b) if _is_ref(b) else b for b in blocks]}
        out.append(message)
    return out


def _sent(messages: list[Message], data: dict[str, str]) -> set[int]:
    """Which reference blocks (by ``id``) a request carries: the newest, within
    ``REQUEST_IMAGES`` and ``REQUEST_BASE64``."""
    chosen: set[int] = set()
    total = 0
    for message in reversed(messages):
        for block in reversed(_blocks(message)):
            if not _is_ref(block) or block["source"]["sha256"] not in data:
                continue
            size = len(data[block["source"]["sha256"]])
            if len(chosen) >= REQUEST_IMAGES or total + size > REQUEST_BASE64:
                return chosen
            chosen.add(id(block))
            total += size
    return chosen


def expand(messages: list[Message], data: dict[str, str]) -> list[Message]:
    """The messages as the API takes them: each reference an image block with its base64
    data, or a text saying it is gone or, for an older one past what a request carries,
    left out (copies: the history keeps its references)."""
    sent = _sent(messages, data)

    def change(block: dict[str, Any]) -> dict[str, Any]:
        source = block["source"]
        name = source.get("name", "")
        encoded = data.get(source["sha256"])
        if encoded is None:
            return {"type": "text", "text": f"[image {name} is no longer available]"}
        if id(block) not in sent:
            return {"type": "text", "text": f"[image {name}: an older image, not sent again]"}
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": source["media_type"], "data": encoded},
        }

    return _replaced(messages, change)


def named(messages: list[Message], shas: set[str]) -> list[Message]:
    """The messages with the images ``shas`` named in a text instead (those of a request
    the API refused: sent again, they would fail every later request too)."""

    def change(block: dict[str, Any]) -> dict[str, Any]:
        if block["source"]["sha256"] not in shas:
            return block
        name = block["source"].get("name", "")
        return {"type": "text", "text": f"[image {name}: not sent, the request with it failed]"}

    return _replaced(messages, change)


def as_text(messages: list[Message]) -> list[Message]:
    """The messages with each image named in a text (a compaction's summary request: the
    model already saw them; sending them again would cost their tokens once more)."""

    def change(block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "text", "text": f"[image: {block['source'].get('name', '')}]"}

    return _replaced(messages, change)


# -- recognising an image by its bytes --------------------------------------------------
def sniff(data: bytes) -> tuple[str, int, int]:
    """(media type, width, height) of a PNG, JPEG, GIF or WebP image, read from its own
    header; ``BadImage`` for anything else or past the API's limits."""
    if len(data) > MAX_BYTES:
        raise BadImage(
            f"it is {len(data) / 1048576:.1f} MB; the model takes images up to 3.75 MB "
            "(5 MB once encoded)"
        )
    try:
        media_type, width, height = _dimensions(data)
    except (struct.error, IndexError):
        media_type, width, height = "", 0, 0
    if not media_type or width <= 0 or height <= 0:
        raise BadImage("it is not a PNG, JPEG, GIF or WebP image")
    if max(width, height) > MAX_SIDE:
        raise BadImage(f"it is {width}×{height} pixels; the model takes up to {MAX_SIDE} a side")
    return media_type, width, height


def _dimensions(data: bytes) -> tuple[str, int, int]:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data.startswith(b"\xff\xd8\xff"):
        return _jpeg(data)
    return "", 0, 0


def _webp(data: bytes) -> tuple[str, int, int]:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return "image/webp", width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return "image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return "image/webp", width, height
    return "", 0, 0


# JPEG start-of-frame markers (baseline, progressive, …), which hold the size.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


JPEG_SCAN = 1 << 20  # the frame header comes early; a scan past this is a crafted file


def _jpeg(data: bytes) -> tuple[str, int, int]:
    i = 2
    while i + 4 <= min(len(data), JPEG_SCAN):
        if data[i] != 0xFF:
            return "", 0, 0
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return "image/jpeg", width, height
        if marker == 0xDA or length < 2:  # image data before any frame header: broken
            return "", 0, 0
        i += 2 + length
    return "", 0, 0
