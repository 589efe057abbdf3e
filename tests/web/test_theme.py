"""The theme is the account's: saved by a small POST (session and CSRF), rendered into
``<html data-theme>`` on every page so the first paint has it."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agent.models import Conversation

pytestmark = pytest.mark.django_db

HTML_THEME = re.compile(r'<html lang="en" data-theme="([^"]*)">')


def page_theme(client, path: str) -> str:
    response = client.get(path)
    found = HTML_THEME.search(response.content.decode())
    assert found, f"{path}: no data-theme on <html>"
    return found.group(1)


def test_a_new_account_follows_the_system(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    assert page_theme(client, f"/c/{conversation.id}/") == "system"


def test_the_chosen_theme_is_stored_and_rendered_on_every_page(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    saved = client.post("/account/theme", {"theme": "light"}, headers={"HX-Request": "true"})
    assert saved.status_code == 204
    ada.refresh_from_db()
    assert ada.theme == "light"
    assert page_theme(client, f"/c/{conversation.id}/") == "light"
    assert page_theme(client, "/files/") == "light"
    assert page_theme(client, f"/c/{conversation.id}x/") == "light"  # the 404 page too
    # the switch on the page shows the choice
    page = client.get(f"/c/{conversation.id}/").content.decode()
    assert re.search(r'<input type="radio" name="theme" value="light" checked>', page)


def test_another_user_is_unaffected(client, ada, bob):
    client.post("/account/theme", {"theme": "dark"}, headers={"HX-Request": "true"})
    bob.refresh_from_db()
    assert bob.theme == "system"
    other = Client()
    other.force_login(bob)
    conversation = Conversation.objects.create(owner=bob, model="m")
    assert page_theme(other, f"/c/{conversation.id}/") == "system"


@pytest.mark.parametrize("bad", ["", "blue", "DARK", "system "])
def test_unknown_themes_are_refused(client, ada, bad):
    assert client.post("/account/theme", {"theme": bad}).status_code == 400
    ada.refresh_from_db()
    assert ada.theme == "system"


def test_without_script_the_form_comes_back_to_the_page(client, ada):
    conversation = Conversation.objects.create(owner=ada, model="m")
    here = f"/c/{conversation.id}/"
    response = client.post("/account/theme", {"theme": "dark", "next": here})
    assert response.status_code == 302 and response["Location"] == here
    away = client.post("/account/theme", {"theme": "dark", "next": "https://evil.example/"})
    assert away["Location"] == "/"


def test_anonymous_users_and_gets_are_refused(client, ada):
    assert client.get("/account/theme").status_code == 405
    anonymous = Client()
    response = anonymous.post("/account/theme", {"theme": "dark"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert page_theme(anonymous, "/accounts/login/") == "system"
    ada.refresh_from_db()
    assert ada.theme == "system"


def test_the_form_needs_its_csrf_token(ada):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(ada)
    assert strict.post("/account/theme", {"theme": "dark"}).status_code == 403
    ada.refresh_from_db()
    assert ada.theme == "system"


def test_the_server_error_page_renders_without_an_account():
    from django.template.loader import render_to_string

    assert HTML_THEME.search(render_to_string("500.html")).group(1) == "system"
