"""Uploading from the page (``PUT /files/upload/<name>``): the session's own workspace,
``uploads/<name>``, CSRF-checked, the upload limit, and hostile names refused with nothing
stored (traversal, absolute, ``..``, NUL, a symlinked ``uploads`` directory)."""

from __future__ import annotations

import os
from urllib.parse import quote

import pytest
from django.test import Client

from agent.access import new_conversation

pytestmark = pytest.mark.django_db


@pytest.fixture
def grace(two_workspaces):
    user, mine, theirs = two_workspaces
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    conversation = new_conversation(user, "claude-haiku-4-5")
    client.get(f"/c/{conversation.id}/")  # the page sets the CSRF cookie
    return client, mine, theirs


def put(client: Client, name: str, data: bytes, *, csrf: bool = True):
    headers = {"X-CSRFToken": client.cookies["csrftoken"].value} if csrf else {}
    return client.put("/files/upload/" + quote(name, safe=""), data,
                      content_type="application/octet-stream", headers=headers)  # fmt: skip


def test_an_upload_lands_in_the_uploads_directory(grace):
    client, mine, _ = grace
    response = put(client, "shot 1.png", b"\x89PNG\r\n\x1a\nabc")
    assert response.status_code == 201
    assert response.json() == {"path": "uploads/shot 1.png", "size": 11}
    assert (mine / "uploads" / "shot 1.png").read_bytes() == b"\x89PNG\r\n\x1a\nabc"
    assert put(client, "shot 1.png", b"v2").status_code == 200  # replaced whole


def test_an_upload_without_the_csrf_token_is_refused(grace):
    client, mine, _ = grace
    response = put(client, "forged.txt", b"from another site", csrf=False)
    assert response.status_code == 403
    assert not (mine / "uploads").exists()


def test_a_signed_out_visitor_cannot_upload(two_workspaces):
    response = Client().put("/files/upload/a.txt", b"x", content_type="text/plain")
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    "name", ["../escape.txt", "../../2/owned.txt", "/etc/passwd", "..", ".", "a/../../b.txt",
             "nul\x00.txt", "line\nbreak.txt", "back\\slash.txt", "x" * 201, " "],
)  # fmt: skip
def test_a_hostile_name_is_bad_path_and_nothing_is_stored(grace, name):
    client, mine, theirs = grace
    before = sorted(p for p in mine.parent.parent.rglob("*"))
    response = put(client, name, b"PWNED")
    assert response.status_code == 400 and response.json()["error"] == "bad_path"
    assert sorted(p for p in mine.parent.parent.rglob("*")) == before


def test_a_symlinked_uploads_directory_is_not_followed(grace):
    client, mine, theirs = grace
    os.symlink(theirs, mine / "uploads")
    response = put(client, "owned.txt", b"PWNED")
    assert response.status_code == 400 and response.json()["error"] == "bad_path"
    assert list(theirs.iterdir()) == []


def test_an_upload_over_the_limit_is_too_large_and_not_stored(grace, settings):
    client, mine, _ = grace
    settings.HARNESS_MAX_UPLOAD_MB = 1
    response = put(client, "big.bin", b"x" * (1024 * 1024 + 1))
    assert response.status_code == 413 and response.json()["error"] == "too_large"
    assert not (mine / "uploads" / "big.bin").exists()
