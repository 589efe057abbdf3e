"""Projects in the browser against a real git remote (smart HTTP with Basic auth on
loopback, testkit/git_server.py): the user's git sign-ins kept in the page (added, replaced,
removed; never a token shown), a project cloned by URL with the stored sign-in and seen
going from cloning to ready without a reload, the agent's bash changing a file, a commit
and a push from the Changes panel, then a push the remote refuses as not a fast-forward;
and projects made from uploaded archives: a good one, a hostile one and one too large, the
typed name kept on each refusal."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
import zipfile

import pytest

from testkit.git_server import GitServer
from testkit.live import LiveServer
from testkit.model_server import text_reply, tool_reply
from tests.conftest import require_bwrap
from tests.e2e.conftest import contexts_on, send, sign_in, wait_idle

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")
TOKEN = "ui-tok-51c0d9e2a8b74f36"
UPLOAD_MB = 1
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def remote():
    with GitServer(user="ada-git", token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def remote_live(tmp_path_factory, remote, model):
    require_bwrap()
    server = LiveServer(tmp_path_factory.mktemp("projects-remote-ui"),
                        HARNESS_EGRESS_ALLOW=remote.host, HARNESS_GIT_TIMEOUT="60",
                        HARNESS_MAX_UPLOAD_MB=str(UPLOAD_MB),
                        ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=model.url,
                        HARNESS_RUNS_PER_MINUTE="1000")  # fmt: skip
    server.start()
    server.create_users("ada", "ben", "cy")
    yield server
    server.stop()


@pytest.fixture
def context_on(browser, remote_live):
    yield from contexts_on(browser, remote_live)


def project_item(page, name: str):
    return page.locator(".project-item", has=page.locator(".project-name", has_text=name))


def save_signin(page, host: str, username: str, token: str) -> None:
    page.fill("#signin-host", host)
    page.fill("#signin-username", username)
    page.fill("#signin-token", token)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#signin-status[data-kind=ok]")


def signins(page) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(
        "#signin-list .signin-item", "els => els.map(e => [e.dataset.host, e.dataset.username])"
    )


def test_signins_clone_commit_push_and_a_refused_push(context_on, remote, fresh_model):
    name = f"app-{uuid.uuid4().hex[:6]}"
    remote.make_repository(f"{name}.git", {"app.py": "print('hi')\n"})
    url = remote.url(f"{name}.git")
    page = sign_in(context_on(), "ada")

    # The sign-ins: none yet; one added from a pasted URL (its host kept), then replaced.
    page.click("#git-signins > summary")
    page.wait_for_selector("#signin-empty:not([hidden])")
    save_signin(page, url, "ada-git", "revoked-" + TOKEN)
    page.wait_for_function("() => document.querySelectorAll('#signin-list .signin-item').length")
    assert signins(page) == [[remote.host, "ada-git"]]
    page.get_by_role("button", name=f"Replace the sign-in for {remote.host}").click()
    assert page.input_value("#signin-host") == remote.host
    assert page.evaluate("document.activeElement.id") == "signin-token"
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_selector("#signin-status[data-kind=ok]")
    assert page.input_value("#signin-token") == ""
    # Another one, removed again; a bad host says why and keeps what was typed.
    save_signin(page, "git.example.com", "someone", "tok-other-0123")
    page.wait_for_function(
        "() => document.querySelectorAll('#signin-list .signin-item').length == 2"
    )
    page.get_by_role("button", name="Remove the sign-in for git.example.com").click()
    page.wait_for_function(
        "() => document.querySelectorAll('#signin-list .signin-item').length == 1"
    )
    page.fill("#signin-host", "bad host!")
    page.fill("#signin-username", "me")
    page.fill("#signin-token", "tok")
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#signin-status[data-kind=error]")
    assert page.inner_text("#signin-status").startswith("Not stored:")
    assert page.input_value("#signin-host") == "bad host!"
    assert page.input_value("#signin-username") == "me"
    stored = page.request.get("/api/credentials/git").json()["hosts"]
    assert stored == [{"host": remote.host, "username": "ada-git"}]
    assert TOKEN not in page.content()

    # A project by URL with the stored sign-in: cloning while the remote holds its answer,
    # then ready, without a reload.
    page.click("#new-project > summary")
    page.fill("#project-name", name)
    page.fill("#project-url", url)
    page.wait_for_selector("#project-credential-known:not([hidden])")
    assert "as ada-git" in page.inner_text("#project-credential-known")
    remote.hold.clear()
    try:
        page.click("#new-project-form button[type=submit]")
        item = project_item(page, name)
        item.locator(".project-state", has_text="cloning…").wait_for()
        assert remote.held.wait(60)
    finally:
        remote.hold.set()
    item.locator(".project-state", has_text="ready").wait_for(timeout=60_000)
    assert all(seen.authorization for seen in remote.requests if name in seen.path)

    # A conversation in it: the agent's bash changes a file; commit and push from the panel.
    item.locator("[data-new-conversation]").click()
    page.wait_for_selector("main[data-project]")
    page.wait_for_selector("body[data-ws=open]")
    fresh_model.enqueue(tool_reply(("bash", {"command": "echo \"print('bye')\" >> app.py"})),
                        text_reply("Done."))  # fmt: skip
    send(page, "say bye too")
    wait_idle(page)
    page.click("#changes-toggle")
    page.locator(".change-file[data-path='app.py'][data-status=modified]").wait_for()
    page.fill("#commit-message", "Say bye")
    page.click("#commit-button")
    page.wait_for_selector("#commit-status[data-kind=ok]")
    page.click("#push-button")
    page.wait_for_selector("#commit-status:is([data-kind=ok], [data-kind=error])", timeout=60_000)
    said = page.inner_text("#commit-status")
    branch = page.inner_text(".changes-branch code")
    assert said.startswith(f"Pushed {branch} ") and url in said, said
    assert said.split("(")[1][:10] == remote.head_of(f"{name}.git", branch)[:10]

    # Someone else moves the branch on: the next push is refused, with git's reason.
    remote.commit_on(f"{name}.git", branch, "theirs.txt", "theirs\n")
    fresh_model.enqueue(tool_reply(("bash", {"command": "echo more >> app.py"})),
                        text_reply("Done."))  # fmt: skip
    send(page, "more")
    wait_idle(page)
    page.fill("#commit-message", "More")
    page.click("#commit-button")
    page.wait_for_selector("#commit-status[data-kind=ok]")
    page.click("#push-button")
    page.wait_for_selector("#commit-status[data-kind=error]", timeout=60_000)
    refused = page.inner_text("#commit-status")
    assert refused.startswith("The remote refused the push"), refused
    assert "rejected" in refused and TOKEN not in refused, refused


def test_signins_by_keyboard_at_phone_width(context_on):
    page = sign_in(context_on(viewport=PHONE), "cy")
    page.click("#menu-toggle")
    page.click("#git-signins > summary")
    page.wait_for_selector("#signin-empty:not([hidden])")
    page.focus("#signin-host")
    page.keyboard.type("git.example.org")
    page.keyboard.press("Tab")
    page.keyboard.type("cy")
    page.keyboard.press("Tab")
    page.keyboard.type("tok-phone-0123")
    page.keyboard.press("Enter")
    page.wait_for_selector("#signin-list .signin-item")
    remove = page.get_by_role("button", name="Remove the sign-in for git.example.org")
    for control in (remove, page.locator("#signin-form button[type=submit]")):
        box = control.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 0.5
        assert box["height"] >= 24
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    remove.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#signin-empty:not([hidden])")
    assert page.request.get("/api/credentials/git").json()["hosts"] == []


def zip_bytes(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


def tar_gz_bytes(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def upload(page, name: str, file_name: str, data: bytes) -> None:
    page.fill("#project-name", name)
    kind = "application/octet-stream"
    page.set_input_files("#project-archive", {"name": file_name, "mimeType": kind, "buffer": data})
    page.click("#new-project-form button[type=submit]")


def test_projects_from_archives(context_on):
    page = sign_in(context_on(), "ben")
    page.click("#new-project > summary")
    projects = page.locator(".project-item").count()

    # A hostile archive: refused whole, the entry and the reason said, nothing made, the
    # name and the chosen file kept for another try.
    name = f"site-{uuid.uuid4().hex[:6]}"
    upload(page, name, "evil.tar.gz", tar_gz_bytes({"ok.txt": "fine\n", "../evil.txt": "out\n"}))
    page.wait_for_selector("#new-project-status[data-kind=error]", timeout=30_000)
    said = page.inner_text("#new-project-status")
    assert "'../evil.txt'" in said and "leaves the root" in said and "Nothing was kept" in said
    assert page.input_value("#project-name") == name
    assert page.eval_on_selector("#project-archive", "e => e.files.length") == 1
    page.click("#project-archive-clear")  # the file let go of, the name still there
    assert page.eval_on_selector("#project-archive", "e => e.files.length") == 0
    assert page.locator("#project-archive-clear").is_hidden()
    assert page.evaluate("document.activeElement.id") == "project-archive"
    assert page.locator(".project-item").count() == projects
    assert page.request.get("/api/projects").json()["projects"] == []

    # Too large: said before anything is sent, and by the server for a body just over.
    upload(page, name, "big.zip", b"\0" * (UPLOAD_MB * 1024 * 1024 + 1))
    page.wait_for_selector("#new-project-status[data-kind=error]")
    assert f"up to {UPLOAD_MB} MB" in page.inner_text("#new-project-status")
    page.evaluate("document.querySelector('#new-project-status').textContent = ''")
    upload(page, name, "edge.zip", b"\0" * (UPLOAD_MB * 1024 * 1024 - 16))
    page.wait_for_function(
        "() => document.querySelector('#new-project-status').textContent.includes('too large')"
    )
    assert page.input_value("#project-name") == name

    # A good one (GitHub's shape: one top directory, stripped): its upload shown going on,
    # then the project ready at once, its files those of the archive.
    page.evaluate("""() => {
        window.seen = [];
        const status = document.querySelector('#new-project-status');
        const bar = document.querySelector('#project-upload');
        new MutationObserver(() => window.seen.push([status.textContent, bar.hidden]))
            .observe(status, {childList: true, characterData: true, subtree: true});
    }""")
    upload(page, name, "site.zip", zip_bytes({"site-main/index.html": "<h1>hi</h1>\n",
                                              "site-main/src/app.js": "1;\n"}))  # fmt: skip
    item = project_item(page, name)
    item.locator(".project-state", has_text="ready").wait_for(timeout=30_000)
    assert page.inner_text("#new-project-status") == f"“{name}” is ready."
    seen = page.evaluate("window.seen")
    assert ["Uploading site.zip…", False] in seen, seen
    assert ["Unpacking the archive and making the first commit…", False] in seen, seen
    assert page.input_value("#project-name") == ""
    assert page.locator("#project-upload").is_hidden()
    assert page.locator("#project-archive-clear").is_hidden()
    (made,) = page.request.get("/api/projects").json()["projects"]
    assert (made["name"], made["state"], made["default_branch"]) == (name, "ready", "main")
    item.locator("[data-new-conversation]").click()
    page.wait_for_selector("main[data-project]")
    conversation = page.get_attribute("main", "data-conversation")
    for path, text in (("index.html", "<h1>hi</h1>\n"), ("src/app.js", "1;\n")):
        response = page.request.get(f"/c/{conversation}/files/download?path={path}")
        assert (response.status, response.text()) == (200, text), path
