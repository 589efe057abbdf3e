"""The read-only workspace browser: own workspace only, confined, escaped."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(client, two_workspaces, tmp_path):
    grace, mine, theirs = two_workspaces
    (mine / "src" / "app.py").write_text("print('<script>alert(1)</script>')\n")
    (mine / "blob.bin").write_bytes(b"\x00\x01\x02")
    (theirs / "secret.txt").write_text("heidi's secret")
    os.symlink(theirs / "secret.txt", mine / "peek.txt")
    client.force_login(grace)
    return mine, theirs


def test_lists_the_users_own_workspace(client, setup):
    page = client.get("/files/").content.decode()
    assert "src/" in page and "blob.bin" in page and "peek.txt" in page
    assert "secret" not in page.replace("peek", "")


def test_shows_a_file_escaped(client, setup):
    page = client.get("/files/?path=src/app.py").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page


def test_binary_files_are_not_shown(client, setup):
    assert "Binary file; not shown." in client.get("/files/?path=blob.bin").content.decode()


@pytest.mark.parametrize(
    "path", ["../2/secret.txt", "/etc/passwd", "peek.txt", "..", "src/../../2", "%2e%2e/2"]
)
def test_nothing_outside_the_workspace_is_shown(client, setup, path):
    response = client.get("/files/", {"path": path})
    assert "heidi" not in response.content.decode() and "root:x" not in response.content.decode()
    if path != "%2e%2e/2":
        assert response.status_code == 404


def test_htmx_requests_get_the_fragment_only(client, setup):
    fragment = client.get("/files/?path=src", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.startswith('<div class="files"') and "app.py" in fragment
    assert "<html" not in fragment


def test_files_need_sign_in(setup):
    from django.test import Client

    response = Client().get("/files/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_file_is_highlighted_by_its_type(client, setup):
    page = client.get("/files/?path=src/app.py").content.decode()
    assert '<div class="file-code"><div class="codehilite"><pre><code>' in page
    assert '<span class="nb">print</span>' in page  # Python's lexer, from the name


def test_a_file_of_unknown_type_or_over_the_cap_is_plain_text(client, setup):
    from agent.ui.highlight import HIGHLIGHT_CAP

    mine, _ = setup
    (mine / "notes.unknownext").write_text("print('hi')\n")
    (mine / "big.py").write_text("x = 1\n" * (HIGHLIGHT_CAP // 6 + 1))
    plain = client.get("/files/?path=notes.unknownext").content.decode()
    assert '<pre class="file-text">print(&#x27;hi&#x27;)\n</pre>' in plain
    assert "codehilite" not in plain
    big = client.get("/files/?path=big.py").content.decode()
    assert "codehilite" not in big and "Too long to highlight; shown as plain text." in big
