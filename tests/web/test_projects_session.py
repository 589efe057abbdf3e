"""The page calls the projects' endpoints with its session: each takes the signed-in
user (no token) and refuses a write without Django's CSRF token."""

from __future__ import annotations

import pytest
from django.test import Client

from agent.models import Conversation, Membership, Project, User

pytestmark = pytest.mark.django_db

READS = ("checkpoints", "changes", "archive")
WRITES = ("restore", "commit", "push")


@pytest.fixture
def page():
    ada = User.objects.create_user("ada", password="pw-ada-12345")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(ada)
    conversation = Conversation.objects.create(owner=ada, model="claude-haiku-4-5")
    browser.get(f"/c/{conversation.id}/")  # sets the CSRF cookie, as the page does
    return browser, conversation


def test_the_session_reaches_every_endpoint_the_page_calls(page):
    browser, conversation = page
    token = browser.cookies["csrftoken"].value
    for path in READS:
        response = browser.get(f"/api/conversations/{conversation.id}/{path}")
        if path == "checkpoints":
            assert response.status_code == 200 and response.json() == {"checkpoints": []}
        else:  # reached the view: it says why not, as to a token's holder
            assert response.json()["error"] == "not_in_project", path
    for path in ("restore", "commit"):
        url = f"/api/conversations/{conversation.id}/{path}"
        response = browser.post(url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token)
        assert response.json()["error"] == "not_in_project", path
    response = browser.post(f"/api/conversations/{conversation.id}/push", HTTP_X_CSRFTOKEN=token)
    assert response.json()["error"] == "no_project"
    response = browser.post("/api/conversations", '{"project": "nope"}',
                            content_type="application/json", HTTP_X_CSRFTOKEN=token)  # fmt: skip
    assert response.status_code == 404 and response.json()["error"] == "not_found"


def test_a_write_without_the_csrf_token_is_refused(page):
    browser, conversation = page
    for path in WRITES:
        response = browser.post(f"/api/conversations/{conversation.id}/{path}", "{}",
                                content_type="application/json")  # fmt: skip
        assert response.status_code == 403, path
    response = browser.post("/api/conversations", "{}", content_type="application/json")
    assert response.status_code == 403
    assert Conversation.objects.count() == 1


def test_a_stranger_session_is_not_found(page):
    _, conversation = page
    lee = User.objects.create_user("lee", password="pw-lee-12345")
    other = Client()
    other.force_login(lee)
    assert other.get(f"/api/conversations/{conversation.id}/changes").status_code == 404
    assert other.get(f"/api/conversations/{conversation.id}/checkpoints").status_code == 404


def test_the_page_shows_projects_and_a_project_conversations_panel_by_role(page):
    browser, _ = page
    ada = User.objects.get(username="ada")
    project = Project.objects.create(owner=ada, name="shop <b>", state=Project.State.FAILED,
                                     error="fatal: <script>x</script>")  # fmt: skip
    conversation = Conversation.objects.create(
        owner=ada, model="claude-haiku-4-5", project=project, branch="harness/0a1b2c3d"
    )
    html = browser.get(f"/c/{conversation.id}/").content.decode()
    assert 'data-state="failed"' in html and "fatal: &lt;script&gt;x&lt;/script&gt;" in html
    assert 'id="project-badge"' in html and "harness/0a1b2c3d" in html
    assert 'class="conv-project"' in html and "shop &lt;b&gt;" in html
    assert 'id="changes-panel"' in html and 'id="commit-form"' in html
    vic = User.objects.create_user("vic", password="pw-vic-12345")
    Membership.objects.create(conversation=conversation, user=vic, role="viewer")
    viewer = Client()
    viewer.force_login(vic)
    html = viewer.get(f"/c/{conversation.id}/").content.decode()
    assert 'id="changes-panel"' in html and "data-can-drive" not in html  # the diff only
    assert 'id="commit-form"' not in html and 'id="archive-link"' not in html
