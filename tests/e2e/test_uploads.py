"""Files into the workspace from the composer (docs/API.md), as a person does it: drop
a file on the composer, paste a screenshot into the prompt, pick files with the button.
Each lands in uploads/ of the workspace and its path in the prompt at the caret; a file
over the limit is refused with the reason and the typed text is kept."""

from __future__ import annotations

import base64
import uuid

from tests import images as made
from tests.e2e.conftest import sign_in

# A file "dropped" or "pasted" the way the browser delivers it: a DataTransfer with a File.
DROP = """([name, text, type]) => {
  const data = new DataTransfer();
  data.items.add(new File([text], name, { type }));
  const composer = document.querySelector(".composer");
  composer.dispatchEvent(new DragEvent("dragenter", { dataTransfer: data, bubbles: true }));
  const over = composer.classList.contains("dropping");
  composer.dispatchEvent(new DragEvent("dragover", { dataTransfer: data, bubbles: true,
                                                     cancelable: true }));
  composer.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true,
                                                 cancelable: true }));
  return over;
}"""
PASTE = """([name, bytes, type]) => {
  const data = new DataTransfer();
  data.items.add(new File([new Uint8Array(bytes)], name, { type }));
  const prompt = document.querySelector("#prompt");
  prompt.dispatchEvent(new ClipboardEvent("paste", { clipboardData: data, bubbles: true,
                                                     cancelable: true }));
}"""
PNG = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13]


def fresh_page(new_context):
    page = sign_in(new_context(), "alice")
    page.click(".new-conv")
    page.wait_for_selector("body[data-ws=open]")
    return page


def downloaded(page, path: str) -> bytes:
    url = page.url + "files/download?path=" + path
    response = page.request.get(url)
    assert response.status == 200, (path, response.status)
    return response.body()


def settled(page) -> None:
    page.wait_for_function(
        "() => !document.querySelector('.composer').dataset.uploading && "
        "!document.querySelector('#prompt').value.includes('[uploading')"
    )


def test_a_file_dropped_on_the_composer_lands_in_uploads_and_its_path_in_the_prompt(
    new_context,
):
    page = fresh_page(new_context)
    name = f"notes-{uuid.uuid4().hex[:6]}.txt"
    page.fill("#prompt", "Summarise")
    page.locator("#prompt").press("End")
    assert page.evaluate(DROP, [name, "dropped text\n", "text/plain"])  # the drop target lit
    settled(page)
    assert page.input_value("#prompt") == f"Summarise uploads/{name} "
    assert not page.locator(".composer.dropping").count()
    assert downloaded(page, f"uploads/{name}") == b"dropped text\n"


def test_a_pasted_screenshot_gets_a_name_of_its_own_and_waits_in_the_tray(new_context):
    page = fresh_page(new_context)
    page.evaluate(PASTE, ["image.png", PNG, "image/png"])
    settled(page)
    item = page.locator("#attachments .attachment[data-path]")
    item.wait_for()
    path = item.get_attribute("data-path")
    assert path.startswith("uploads/screenshot-") and path.endswith(".png")
    assert page.input_value("#prompt") == ""  # an image is shown to the model, not named
    assert downloaded(page, path) == bytes(PNG)
    page.click(f"#attachments button[aria-label='Remove {path.split('/')[-1]}']")
    assert page.locator("#attachments").is_hidden()


def test_an_attached_image_is_sent_to_the_model_and_shown_in_the_prompts_part(
    new_context, fresh_model
):
    page = fresh_page(new_context)
    shot = made.png(40, 30, shade=200)
    with page.expect_file_chooser() as chooser:
        page.click("#attach")
    chooser.value.set_files([{"name": "chart.png", "mimeType": "image/png", "buffer": shot}])
    page.locator(
        "#attachments .attachment[data-path='uploads/chart.png'] img[src^='data:']"
    ).wait_for()
    page.fill("#prompt", "What does this chart show?")
    page.locator("#prompt").press("Enter")
    part = page.locator("[data-part=user]").last
    part.locator(".user-images img").wait_for()
    page.wait_for_function("() => document.querySelector('.user-images img').naturalWidth === 40")
    assert part.locator(".user-text").inner_text() == "What does this chart show?"
    page.wait_for_selector("[data-part=text]")
    assert page.locator("#attachments").is_hidden()  # the tray emptied once accepted
    assert page.input_value("#prompt") == ""
    sent = [block for message in fresh_model.bodies[-1]["messages"] if message["role"] == "user"
            for block in message["content"] if block.get("type") == "image"]  # fmt: skip
    assert [block["source"]["data"] for block in sent] == [base64.b64encode(shot).decode()]
    page.reload()  # the first page draws the thumbnail too
    page.locator(".user-images img").wait_for()
    page.wait_for_function("() => document.querySelector('.user-images img').naturalWidth === 40")


def test_a_refused_image_keeps_the_text_and_the_tray(new_context, fresh_model):
    page = fresh_page(new_context)
    page.evaluate(PASTE, ["fake.png", PNG, "image/png"])  # a PNG signature, then nothing
    page.locator("#attachments .attachment[data-path]").wait_for()
    page.fill("#prompt", "look at this")
    page.locator("#prompt").press("Enter")
    alert = page.locator("#composer-alert[data-code=bad_image]")
    alert.wait_for()
    assert "not a PNG, JPEG, GIF or WebP" in alert.inner_text()
    assert page.input_value("#prompt") == "look at this"
    assert page.locator("#attachments .attachment").count() == 1
    assert not fresh_model.requests


def test_files_picked_with_the_button_are_uploaded_each(new_context):
    page = fresh_page(new_context)
    names = [f"pick-{uuid.uuid4().hex[:6]}-{n}.txt" for n in (1, 2)]
    assert page.get_attribute("#attach", "aria-label").startswith("Attach files")
    with page.expect_file_chooser() as chooser:
        page.click("#attach")
    chooser.value.set_files([{"name": n, "mimeType": "text/plain", "buffer": n.encode()}
                             for n in names])  # fmt: skip
    settled(page)
    for name in names:
        assert f"uploads/{name}" in page.input_value("#prompt")
        assert downloaded(page, f"uploads/{name}") == name.encode()


def test_a_refused_upload_says_why_and_keeps_the_typed_text(new_context, live):
    page = fresh_page(new_context)
    page.fill("#prompt", "my words")
    page.locator("#prompt").press("End")
    page.evaluate(DROP, ["bad\x01name.txt", "x", "text/plain"])  # a name the server refuses
    settled(page)
    assert page.input_value("#prompt").strip() == "my words"
    alert = page.locator("#composer-alert[data-code=upload]")
    assert alert.is_visible() and "cannot be stored" in alert.inner_text()


def test_an_upload_over_the_limit_says_the_limit(new_context, live):
    """The body limit answers before any view: the page still shows the API's JSON reason
    (the first-use review saw only "could not be uploaded")."""
    page = fresh_page(new_context)
    page.fill("#prompt", "kept")
    over = """() => {
      const data = new DataTransfer();
      data.items.add(new File([new Uint8Array(26 * 1024 * 1024)], "huge.bin"));
      document.querySelector(".composer").dispatchEvent(
        new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
    }"""
    page.evaluate(over)
    settled(page)
    alert = page.locator("#composer-alert[data-code=upload]")
    assert "huge.bin is larger than the upload limit" in alert.inner_text()
    assert "26,214,400 bytes" in alert.inner_text()
    assert page.input_value("#prompt").strip() == "kept"
