"""Images attached to a prompt, in the core: recognised by their bytes
within the API's limits, kept in the history as references and expanded into the API's
base64 blocks only for a request, named (not re-sent) in a compaction's summary request,
and counted by the context estimate."""

from __future__ import annotations

import pytest

from agent.core import compaction, images
from agent.core.images import BadImage, ImageRef
from tests import images as made


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (made.png(2, 3), ("image/png", 2, 3)),
        (made.jpeg(3, 2), ("image/jpeg", 3, 2)),
        (made.gif(4, 5), ("image/gif", 4, 5)),
        (made.webp_vp8x(640, 480), ("image/webp", 640, 480)),
        (made.webp_lossless(7, 9), ("image/webp", 7, 9)),
        (made.webp_lossy(11, 13), ("image/webp", 11, 13)),
    ],
)
def test_an_image_is_recognised_by_its_own_header(data, expected):
    assert images.sniff(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello, not an image",
        b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        b"<!doctype html><img src=x onerror=alert(1)>",
        b"%PDF-1.7\n",
        b"\x89PNG\r\n\x1a\n",  # a PNG signature with nothing after it
        b"\xff\xd8\xff\xda\x00\x08",  # a JPEG with image data before any frame header
        b"GIF89a",  # cut off before the size
        made.png(0, 5),  # no pixels
    ],
)
def test_anything_else_is_not_an_image_the_model_takes(data):
    with pytest.raises(BadImage, match="not a PNG, JPEG, GIF or WebP"):
        images.sniff(data)


def test_an_image_past_the_apis_limits_is_refused_saying_which():
    with pytest.raises(BadImage, match="8001×10 pixels"):
        images.sniff(made.gif(8001, 10))
    # The API's 5 MB is of the base64: 3.75 MB of bytes.
    assert images.MAX_BYTES * 4 / 3 <= 5 * 1024 * 1024
    with pytest.raises(BadImage, match="3.75 MB"):
        images.sniff(made.png() + b"\x00" * images.MAX_BYTES)


def test_a_crafted_jpeg_is_scanned_no_further_than_a_frame_header_can_be():
    padded = b"\xff\xd8" + b"\xff\x01" * (images.JPEG_SCAN // 2) + made.jpeg()[2:]
    with pytest.raises(BadImage, match="not a PNG"):
        images.sniff(padded[: images.MAX_BYTES])


REF = ImageRef("ab" * 32, "image/png", "uploads/shot.png")


def test_a_prompt_holds_references_its_images_first_then_where_they_are_then_the_text():
    blocks = images.prompt_blocks("what is this?", (REF,))
    assert blocks == [
        {"type": "image", "source": {"type": "harness_image", "sha256": "ab" * 32,
                                     "media_type": "image/png", "name": "uploads/shot.png"}},
        {"type": "text", "text": "[Attached image, also in the workspace: uploads/shot.png]"},
        {"type": "text", "text": "what is this?"},
    ]  # fmt: skip
    assert images.prompt_blocks("plain", ()) == [{"type": "text", "text": "plain"}]


def test_references_expand_into_base64_blocks_for_a_request_and_the_history_keeps_them():
    history = [{"role": "user", "content": images.prompt_blocks("look", (REF,))},
               {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]}]  # fmt: skip
    assert images.references(history) == ["ab" * 32]
    sent = images.expand(history, {"ab" * 32: "QUJD"})
    assert sent[0]["content"][0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"},
    }
    assert sent[1] is history[1]  # messages without images are not copied
    assert history[0]["content"][0]["source"]["type"] == "harness_image"  # unchanged
    gone = images.expand(history, {})
    assert gone[0]["content"][0] == {
        "type": "text",
        "text": "[image uploads/shot.png is no longer available]",
    }


def test_a_compactions_summary_request_names_the_images_instead_of_sending_them():
    older = [{"role": "user", "content": images.prompt_blocks("look", (REF,))},
             {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]}]  # fmt: skip
    request = compaction.summary_messages(older)
    assert request[0]["content"][0] == {"type": "text", "text": "[image: uploads/shot.png]"}
    assert not images.references(request)


def test_the_context_estimate_counts_an_image_as_the_tokens_it_costs_not_its_reference():
    plain = [{"role": "user", "content": [{"type": "text", "text": "look"}]}]
    with_image = [{"role": "user", "content": images.prompt_blocks("look", (REF,))}]
    extra = compaction.size(with_image) - compaction.size(plain)
    assert extra >= images.ESTIMATE_CHARS


def test_a_request_carries_the_newest_images_within_its_budget_and_names_the_older():
    refs = [ImageRef(f"{n:02x}" * 32, "image/png", f"uploads/{n}.png") for n in range(25)]
    history = [{"role": "user", "content": images.prompt_blocks(f"p{n}", (ref,))}
               for n, ref in enumerate(refs)]  # fmt: skip
    data = {ref.sha256: "QUJD" for ref in refs}
    sent = images.expand(history, data)
    kinds = [m["content"][0].get("type") for m in sent]
    assert kinds == ["text"] * 5 + ["image"] * 20  # the newest 20
    assert sent[0]["content"][0]["text"] == "[image uploads/0.png: an older image, not sent again]"
    big = {ref.sha256: "x" * (images.REQUEST_BASE64 // 3) for ref in refs}
    kinds = [m["content"][0].get("type") for m in images.expand(history, big)]
    assert kinds.count("image") == 3 and kinds[-3:] == ["image"] * 3


def test_a_name_shows_without_control_characters_or_direction_overrides():
    assert images.shown_name("uploads/\u202egnp.exe\n.png") == "uploads/gnp.exe.png"
