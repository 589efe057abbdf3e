"""Downloading a file from a conversation's Files panel: one's own workspace only, read
through the descriptor walk, always an attachment that no browser renders in the app's
origin. The attacks: a symlink out of the workspace, a FIFO, ``../``, another user's
conversation, no session."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.test import Client

from agent.access import new_conversation
from agent.models import User
from agent.ui.browse import DOWNLOAD_CAP

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(client, two_workspaces, tmp_path):
    grace, mine, theirs = two_workspaces
    (mine / "src" / "app.py").write_bytes(b"print('hi')\n")
    (mine / "page.html").write_text("<script>alert(document.cookie)</script>")
    (theirs / "secret.txt").write_text("heidi's secret")
    (tmp_path / "outside.txt").write_text("outside secret")
    os.symlink(theirs / "secret.txt", mine / "peek.txt")
    os.symlink(tmp_path / "outside.txt", mine / "out.txt")
    os.symlink("../../outside.txt", mine / "climb.txt")
    os.mkfifo(mine / "pipe")
    client.force_login(grace)
    mine_conversation = new_conversation(grace, "claude-haiku-4-5")
    heidi = User.objects.get(username="heidi")
    theirs_conversation = new_conversation(heidi, "claude-haiku-4-5")
    return mine, mine_conversation, theirs_conversation


def url(conversation) -> str:
    return f"/c/{conversation.id}/files/download"


def test_a_file_downloads_as_an_attachment(client, setup):
    _, conversation, _ = setup
    response = client.get(url(conversation), {"path": "src/app.py"})
    assert response.status_code == 200
    assert response.content == b"print('hi')\n"
    assert response["Content-Disposition"] == 'attachment; filename="app.py"'
    assert response["Content-Type"] == "application/octet-stream"
    assert response["X-Content-Type-Options"] == "nosniff"


def test_an_html_file_is_never_served_as_html(client, setup):
    _, conversation, _ = setup
    response = client.get(url(conversation), {"path": "page.html"})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Security-Policy"].startswith("sandbox")


@pytest.mark.parametrize("path", ["peek.txt", "out.txt", "climb.txt"])
def test_a_symlink_out_of_the_workspace_is_refused(client, setup, path):
    _, conversation, _ = setup
    response = client.get(url(conversation), {"path": path})
    assert response.status_code == 404
    assert b"secret" not in response.content
    assert response.content.startswith(b"Not downloaded: ")
    assert response["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize(
    "path", ["../2/secret.txt", "../../outside.txt", "src/../../2/secret.txt", "/etc/passwd",
             "..", "%2e%2e/outside.txt", "src/../../../outside.txt"],
)  # fmt: skip
def test_traversal_is_refused(client, setup, path):
    _, conversation, _ = setup
    response = client.get(url(conversation), {"path": path})
    assert response.status_code == 404
    assert b"secret" not in response.content and b"root:" not in response.content
    assert response.content.startswith(b"Not downloaded: ")


def test_a_fifo_is_refused_without_hanging(client, setup):
    _, conversation, _ = setup

    def hung(*_):
        raise TimeoutError("the download of a FIFO hung")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)  # a blocking open or read of the FIFO would sit here forever
    try:
        started = time.monotonic()
        response = client.get(url(conversation), {"path": "pipe"})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - started < 5
    assert response.status_code == 404
    assert b"not a regular file" in response.content


def test_a_directory_is_not_a_download(client, setup):
    _, conversation, _ = setup
    assert client.get(url(conversation), {"path": "src"}).status_code == 404


def test_a_file_over_the_cap_is_refused_with_a_clear_error(client, setup):
    mine, conversation, _ = setup
    with open(mine / "huge.bin", "wb") as f:
        f.truncate(DOWNLOAD_CAP + 1)  # sparse: costs no disk
    response = client.get(url(conversation), {"path": "huge.bin"})
    assert response.status_code == 413
    assert b"too large to download" in response.content


def test_another_users_conversation_is_404(client, setup):
    _, mine, theirs = setup
    assert client.get(url(mine), {"path": "src/app.py"}).status_code == 200
    response = client.get(url(theirs), {"path": "src/app.py"})
    assert response.status_code == 404 and b"print" not in response.content


def test_a_signed_out_visitor_is_sent_to_sign_in(setup):
    _, conversation, _ = setup
    response = Client().get(url(conversation), {"path": "src/app.py"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_panel_offers_downloads_under_the_conversation(client, setup):
    _, conversation, theirs = setup
    listing = client.get(f"/c/{conversation.id}/files/", HTTP_HX_REQUEST="true")
    page = listing.content.decode()
    assert f'href="/c/{conversation.id}/files/download?path=src/app.py"' not in page  # a dir
    assert f'href="/c/{conversation.id}/files/download?path=page.html" download' in page
    panel = f"/c/{conversation.id}/files/"
    view = client.get(panel, {"path": "src/app.py"}, HTTP_HX_REQUEST="true").content.decode()
    assert f'href="/c/{conversation.id}/files/download?path=src/app.py" download' in view
    assert client.get(f"/c/{theirs.id}/files/", HTTP_HX_REQUEST="true").status_code == 404


def test_the_panel_offers_no_download_of_a_file_over_the_cap(client, setup):
    """A link that can only answer 413 is not offered: the listing and the file's view say
    it is too large instead."""
    mine, conversation, _ = setup
    with open(mine / "huge.bin", "wb") as f:
        f.truncate(DOWNLOAD_CAP + 1)  # sparse: costs no disk
    panel = f"/c/{conversation.id}/files/"
    listing = client.get(panel, HTTP_HX_REQUEST="true").content.decode()
    assert "download?path=huge.bin" not in listing
    assert "download?path=page.html" in listing
    view = client.get(panel, {"path": "huge.bin"}, HTTP_HX_REQUEST="true").content.decode()
    assert "download?path=huge.bin" not in view and "too large to download" in view
